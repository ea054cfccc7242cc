import { describe, expect, it } from "vitest";
import { deriveLatency } from "../../src/domain/timing";

const base = Date.parse("2026-01-01T00:00:00.000Z");
const at = (ms: number) => new Date(base + ms);

describe("deriveLatency (the one timing serializer)", () => {
  it("derives the five latencies from the five facts", () => {
    expect(
      deriveLatency({
        created_at: at(0),
        started_at: at(12),
        prepared_at: at(15),
        first_output_at: at(55),
        finished_at: at(900),
      }),
    ).toEqual({
      dispatch_latency_ms: 12,
      preparation_latency_ms: 3,
      model_first_output_latency_ms: 40,
      first_output_latency_ms: 55,
      total_latency_ms: 900,
    });
  });

  it("is null where a point is missing, and only there", () => {
    const l = deriveLatency({
      created_at: at(0),
      started_at: at(5),
      prepared_at: null,
      first_output_at: null,
      finished_at: at(9),
    });
    expect(l.dispatch_latency_ms).toBe(5);
    expect(l.preparation_latency_ms).toBeNull();
    expect(l.model_first_output_latency_ms).toBeNull();
    expect(l.first_output_latency_ms).toBeNull();
    expect(l.total_latency_ms).toBe(9);
  });

  it("never goes negative when writers' clocks disagree", () => {
    const l = deriveLatency({
      created_at: at(100),
      started_at: at(90),
      prepared_at: at(80),
      first_output_at: at(70),
      finished_at: at(60),
    });
    for (const v of Object.values(l)) expect(v).toBe(0);
  });

  it("accepts ISO strings and treats garbage as missing", () => {
    const l = deriveLatency({
      created_at: "2026-01-01T00:00:00.000Z",
      started_at: "2026-01-01T00:00:01.500Z",
      prepared_at: "not a date",
      first_output_at: null,
      finished_at: null,
    });
    expect(l.dispatch_latency_ms).toBe(1500);
    expect(l.preparation_latency_ms).toBeNull();
  });
});

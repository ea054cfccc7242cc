import { describe, expect, it } from "vitest";
import { CreateJobBodySchema, ListJobsQuerySchema } from "../../src/contracts/job";
import { isStorableText, storable } from "../../src/contracts/text";
import { decodeCursor, encodeCursor } from "../../src/db/jobs-repo";
import { backoffDelay, jitter } from "../../src/domain/backoff";

describe("request contracts", () => {
  const ok = { input: { messages: [{ role: "user", content: "hi" }] } };

  it("accepts the documented body and rejects wrong shapes", () => {
    expect(CreateJobBodySchema.safeParse(ok).success).toBe(true);
    expect(CreateJobBodySchema.safeParse({ ...ok, tools: ["shell", "list_dir"] }).success).toBe(true);
    expect(CreateJobBodySchema.safeParse({}).success).toBe(false);
    expect(CreateJobBodySchema.safeParse({ input: { messages: [] } }).success).toBe(false);
    expect(CreateJobBodySchema.safeParse({ input: { messages: [{ role: "user", content: 5 }] } }).success).toBe(false);
    expect(CreateJobBodySchema.safeParse({ ...ok, tools: ["rm -rf"] }).success).toBe(false);
    expect(CreateJobBodySchema.safeParse({ ...ok, unknown_field: 1 }).success).toBe(false);
    expect(CreateJobBodySchema.safeParse({ ...ok, conversation_id: "has space" }).success).toBe(false);
    expect(CreateJobBodySchema.safeParse({ ...ok, metadata: { big: "x".repeat(20_000) } }).success).toBe(false);
  });

  it("bounds the admission fields and refuses delay_s with run_at, naming run_at", () => {
    const parse = (extra: Record<string, unknown>) => CreateJobBodySchema.safeParse({ ...ok, ...extra });
    for (const good of [
      { priority: -100 },
      { priority: 100 },
      { delay_s: 0 },
      { delay_s: 31_536_000 },
      { run_at: new Date(Date.now() + 60_000).toISOString() },
      { run_at: "2020-01-01T00:00:00+02:00" },
      { ttl_s: 1 },
      { ttl_s: 2_592_000 },
      { concurrency_key: "k".repeat(128) },
    ]) {
      expect(parse(good).success, JSON.stringify(good)).toBe(true);
    }
    for (const bad of [
      { priority: 101 },
      { priority: 1.5 },
      { delay_s: -1 },
      { delay_s: 31_536_001 },
      { run_at: "tomorrow" },
      { run_at: "2026-12-02T09:00:00" },
      { run_at: new Date(Date.now() + 400 * 86_400_000).toISOString() },
      { ttl_s: 0 },
      { ttl_s: 2_592_001 },
      { concurrency_key: "" },
      { concurrency_key: "k".repeat(129) },
    ]) {
      expect(parse(bad).success, JSON.stringify(bad)).toBe(false);
    }
    const both = parse({ delay_s: 5, run_at: new Date().toISOString() });
    expect(both.success).toBe(false);
    expect(both.error?.issues.map((i) => [i.path.join("."), i.message])).toEqual([
      ["run_at", "give delay_s or run_at, not both"],
    ]);
  });

  it("bounds list limits", () => {
    expect(ListJobsQuerySchema.parse({}).limit).toBe(20);
    expect(ListJobsQuerySchema.safeParse({ limit: "0" }).success).toBe(false);
    expect(ListJobsQuerySchema.safeParse({ limit: "101" }).success).toBe(false);
    expect(ListJobsQuerySchema.safeParse({ state: "bogus" }).success).toBe(false);
  });

  it("round-trips list cursors and rejects forged ones", () => {
    const c = { createdAt: "2026-01-01T00:00:00.000Z", id: "0b8f6f9e-1c2d-4e5f-8a9b-0c1d2e3f4a5b" };
    expect(decodeCursor(encodeCursor(c))).toEqual(c);
    expect(decodeCursor("not-base64!")).toBeNull();
    expect(decodeCursor(btoa(JSON.stringify(["2026-01-01", "not-a-uuid"])))).toBeNull();
  });
});

describe("backoff", () => {
  it("stays within [0, min(max, base*2^n)) and jitter within its spread", () => {
    for (let n = 0; n < 12; n++) {
      const d = backoffDelay(n, { baseMs: 10, maxMs: 1000 }, () => 0.999999);
      expect(d).toBeLessThan(Math.min(1000, 10 * 2 ** n));
      expect(backoffDelay(n, { baseMs: 10, maxMs: 1000 }, () => 0)).toBe(0);
    }
    expect(jitter(100, 0.2, () => 0)).toBe(80);
    expect(jitter(100, 0.2, () => 1)).toBe(120);
  });
});

describe("storable: what a host writes of model and tool text", () => {
  it("replaces NUL and lone surrogates (keys included) with U+FFFD, keeps pairs, and copies nothing when clean", () => {
    const clean = { a: ["x", 1, null, { b: "\u{1F600}" }], n: 2 };
    expect(storable(clean)).toBe(clean);
    const odd = { "k\u0000": ["A\u0000B", "\ud800x\udc00", "\u{1F600}"], keep: { v: 1 } };
    const out = storable(odd);
    expect(out).toEqual({ "k\uFFFD": ["A\uFFFDB", "\uFFFDx\uFFFD", "\u{1F600}"], keep: { v: 1 } });
    expect(out.keep).toBe(odd.keep);
    expect(odd["k\u0000"][0]).toBe("A\u0000B");
    expect(isStorableText(JSON.stringify(out))).toBe(true);
  });
});

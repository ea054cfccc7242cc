/**
 * The host's delta coalescing (sandbox-host/runner/model-turn.ts): a turn's first text goes out
 * at once, later text waits at most the window, and nothing is lost or reordered.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { DeltaCoalescer, MAX_DELTA_CHARS } from "../../sandbox-host/runner/model-turn";

describe("DeltaCoalescer", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  function collect(windowMs: number) {
    const out: Array<{ at: number; text: string }> = [];
    const start = Date.now();
    const c = new DeltaCoalescer(
      ((_type: string, p: { text: string }) => {
        out.push({ at: Date.now() - start, text: p.text });
      }) as never,
      windowMs,
    );
    return { c, out };
  }

  it("sends the first delta at once and holds later ones no longer than the window", () => {
    const { c, out } = collect(30);
    c.push("a");
    expect(out).toEqual([{ at: 0, text: "a" }]);
    vi.advanceTimersByTime(20);
    c.push("b");
    vi.advanceTimersByTime(20);
    c.push("c");
    expect(out).toHaveLength(1);
    vi.advanceTimersByTime(10); // 30 ms after "b"
    expect(out).toEqual([
      { at: 0, text: "a" },
      { at: 50, text: "bc" },
    ]);
    c.push("d");
    c.flush();
    expect(out.map((o) => o.text).join("")).toBe("abcd");
  });

  it("flushes early at MAX_DELTA_CHARS, and a window of 0 coalesces nothing", () => {
    const { c, out } = collect(30);
    c.push("x");
    c.push("y".repeat(MAX_DELTA_CHARS));
    expect(out.map((o) => o.text.length)).toEqual([1, MAX_DELTA_CHARS]);
    const zero = collect(0);
    zero.c.push("a");
    zero.c.push("b");
    expect(zero.out.map((o) => o.text)).toEqual(["a", "b"]);
  });
});

/**
 * The host's check of an answer against an agent's response_format (sandbox-host/runner/
 * response-format.ts), through a real offload pool: a backtracking pattern ends at its time
 * bound without holding the caller's loop, a too-deep answer is an invalid answer (not a blown
 * stack), and what a person reads of an invalid one says what is wrong in words.
 */
import { afterAll, describe, expect, it } from "vitest";
import { OffloadPool } from "../../sandbox-host/offload/pool";
import { ANSWER_CHECK_TIMEOUT_MS, answerFormat } from "../../sandbox-host/runner/response-format";
import { measureLoopGap } from "../helpers/loop-gap";

const pool = new OffloadPool({ size: 1 });
afterAll(() => pool.close({ timeoutMs: 0 }));

const check = (schema: Record<string, unknown>, answer: string) => answerFormat("t", schema, pool).check(answer);

describe("response_format answer check", () => {
  it("ends a backtracking pattern at its bound, as a final problem, while the caller's loop keeps ticking", async () => {
    const {
      result: checked,
      tookMs: took,
      worstGapMs: worstGap,
    } = await measureLoopGap(() => check({ type: "string", pattern: "(a+)+$" }, JSON.stringify(`${"a".repeat(34)}!`)));
    expect(checked).toMatchObject({ ok: false, final: true });
    expect(checked.ok === false && checked.problems).toMatch(/schema check timed out after 2000 ms/);
    expect(took).toBeGreaterThanOrEqual(ANSWER_CHECK_TIMEOUT_MS - 50);
    expect(took).toBeLessThan(ANSWER_CHECK_TIMEOUT_MS + 3000);
    expect(worstGap).toBeLessThan(500);
    // The thread was replaced: the next check runs.
    expect(await check({ type: "string", pattern: "^a+$" }, '"aaa"')).toEqual({ ok: true, value: "aaa" });
  }, 20_000);

  it("refuses a 30,000-deep answer to a recursive schema as invalid, not as a crash", async () => {
    const schema = { type: "array", items: { $ref: "#" } };
    const deep = `${"[".repeat(30_000)}${"]".repeat(30_000)}`;
    const checked = await check(schema, deep);
    expect(checked).toEqual({ ok: false, problems: "the answer nests 30000 levels deep; at most 512 are checked" });
    expect(await check(schema, "[[[]],[]]")).toEqual({ ok: true, value: [[[]], []] });
  }, 20_000);
});

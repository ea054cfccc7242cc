/**
 * The load generator end to end, small: a self-started stack (2 hosts), steps 1 and 5 of the text
 * scenario over real HTTP + SSE. Every run must be strictly successful, the results JSON and the
 * offline HTML report must exist, and every sampled resource must be back to its baseline.
 */
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type LoadOutcome, runLoad } from "../../tools/load/runner";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

describe.skipIf(!canRun)("load generator smoke", () => {
  let out: string | null = null;
  afterAll(async () => {
    if (out) await rm(out, { recursive: true, force: true });
  });

  it("runs steps 1 and 5 strictly, writes results.json and report.html, and resources return to baseline", async () => {
    out = await mkdtemp(join(tmpdir(), "ear-load-smoke-"));
    const outcome: LoadOutcome = await runLoad({
      root: process.cwd(),
      selfStart: { hosts: 2, maxRuns: 8 },
      steps: [1, 5],
      scenarios: ["text"],
      script: { ttftMs: 100, tokensPerS: 100, replyTokens: 20 },
      runTimeoutMs: 30_000,
      settleMs: 35_000,
      outRoot: out,
      progress: false,
    });
    const { results } = outcome;
    expect(results.steps.map((s) => [s.concurrency, s.runs, s.strictOk])).toEqual([
      [1, 1, 1],
      [5, 5, 5],
    ]);
    expect(results.runs.every((r) => r.ok && r.finalState === "completed")).toBe(true);
    // Client and server metrics are both present and kept apart.
    const top = results.steps[1];
    expect(top?.client.preparation.n).toBe(5);
    expect(top?.server.dispatch.n).toBe(5);
    expect(results.settle.checks.filter((c) => !c.ok)).toEqual([]);
    expect(results.settle.ok).toBe(true);
    expect(outcome.ok).toBe(true);
    expect(existsSync(outcome.resultsPath)).toBe(true);
    expect(existsSync(outcome.reportPath)).toBe(true);
    const html = await readFile(outcome.reportPath, "utf8");
    expect(html).toContain("<svg");
    expect(html).not.toMatch(/<script|https?:\/\/(?!127\.0\.0\.1|www\.w3\.org)/);
    const parsed = JSON.parse(await readFile(outcome.resultsPath, "utf8")) as { run_id: string };
    expect(parsed.run_id).toBe(results.run_id);
  }, 90_000);
});

/**
 * The load generator end to end, small: a self-started stack (2 hosts), steps 1 and 5 of the text
 * scenario over real HTTP + SSE, the VUs in 2 client processes. Every run must be strictly
 * successful, the results JSON and the offline HTML report must exist, every sampled resource
 * must be back to its baseline, and the step's breakdown (its parts adding up to what the client
 * measured), the CPU per process and every load process's event-loop delay must be there.
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
      clientProcs: 2,
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

    // The VUs ran in 2 forked client processes, each reporting its event-loop delay beside the parent's.
    if (!top) throw new Error("no step 5");
    expect(top.clientProcs).toBe(2);
    expect(top.loops.map((l) => [l.proc, l.vus])).toEqual([
      ["load parent", 0],
      ["load client 1", 3],
      ["load client 2", 2],
    ]);
    expect(new Set(top.loops.map((l) => l.pid)).size).toBe(3);
    expect(top.loops[0]?.pid).toBe(process.pid);
    for (const l of top.loops) {
      for (const x of [l.p50Ms, l.p99Ms, l.maxMs]) expect(x).toBeGreaterThanOrEqual(0);
      expect(l.maxMs as number).toBeGreaterThanOrEqual(l.p99Ms as number);
      expect(l.p99Ms as number).toBeGreaterThanOrEqual(l.p50Ms as number);
    }

    // The breakdown's parts are measured for every run and add up to what the client saw (the
    // wall clock against the monotonic one: a few ms of rounding).
    const b = top.breakdown;
    for (const dist of [
      b.submit.clientSetup,
      b.submit.roundTrip,
      b.submit.toInsert,
      b.submit.insertToAnswer,
      b.stream.headers,
    ]) {
      expect(dist.n).toBe(5);
    }
    expect(b.stream.headersToFirstEvent.n).toBe(5);
    expect(b.events.firstEvent.n).toBe(5);
    expect(b.events.terminal.n).toBe(5);
    expect(b.events.finishedToReceive.n).toBe(5);
    const stepRuns = results.runs.filter((r) => r.step === 5);
    // Every streamed event carried the host's emit time.
    expect(b.events.emitToReceive.n).toBe(stepRuns.reduce((a, r) => a + r.events, 0));
    for (const r of stepRuns) {
      const p = r.path;
      // The parts meet on the wall clock (the row's created_at): each is clamped at 0, so a part
      // that came out negative (a wall clock stepped during the run) shows here; the parts print.
      expect(
        Math.abs(
          (p.clientSetupMs as number) +
            (p.submitToInsertMs as number) +
            (p.insertToAnswerMs as number) -
            (r.client.submitMs as number),
        ),
        JSON.stringify({ path: p, client: r.client }),
      ).toBeLessThanOrEqual(5);
      const prep =
        (r.client.submitMs as number) +
        (p.answerToStreamMs as number) +
        (p.streamHeadersMs as number) +
        (p.headersToFirstEventMs as number);
      expect(Math.abs(prep - (r.client.preparationMs as number))).toBeLessThanOrEqual(5);
      expect(r.eventPathSamples).toBeUndefined();
    }
    const shares = b.preparationShares.reduce((a, x) => a + x.share, 0);
    expect(shares).toBeGreaterThan(0.99);
    expect(shares).toBeLessThan(1.01);
    expect(b.missing.length).toBeGreaterThan(0);

    // CPU per part of the stack: the gateway's workerd served every request, each host and each
    // client process is its own part, and the busiest part is named.
    const cpu = top.cpu;
    if (!cpu) throw new Error("no CPU figures (Linux /proc expected)");
    const parts = new Map(cpu.parts.map((p) => [p.part, p]));
    expect(parts.get("workerd")?.cpuMs ?? 0).toBeGreaterThan(0);
    for (const id of results.target.hosts) expect(parts.has(`host ${id}`)).toBe(true);
    expect(parts.has("load parent")).toBe(true);
    expect(parts.has("load client 1") && parts.has("load client 2")).toBe(true);
    expect(parts.has("postgres")).toBe(true);
    for (const p of cpu.parts) expect(p.cores).toBeGreaterThanOrEqual(0);
    expect(top.bottleneck.busiest).toBe(`busiest ${cpu.parts[0]?.part} ${cpu.parts[0]?.cores.toFixed(2)} cores`);
    expect(cpu.machineBusyCores as number).toBeGreaterThan(0);
    // The machine's busy cores include the stack's (10 % slack: two clocks, 10 ms ticks).
    expect(cpu.machineBusyCores as number).toBeGreaterThanOrEqual(cpu.totalCores * 0.9);
    for (const p of cpu.parts) expect(p.waitingCores).toBeGreaterThanOrEqual(0);
    expect(top.bottleneck.preparation).toMatch(/ \d+ %$/);
    expect(results.settle.checks.filter((c) => !c.ok)).toEqual([]);
    expect(results.settle.ok).toBe(true);
    expect(outcome.ok).toBe(true);
    expect(existsSync(outcome.resultsPath)).toBe(true);
    expect(existsSync(outcome.reportPath)).toBe(true);
    const html = await readFile(outcome.reportPath, "utf8");
    expect(html).toContain("<svg");
    expect(html).toContain("Where the time went");
    expect(html).toContain("Event-loop delay of the load processes");
    expect(html).not.toMatch(/<script|https?:\/\/(?!127\.0\.0\.1|www\.w3\.org)/);
    const parsed = JSON.parse(await readFile(outcome.resultsPath, "utf8")) as { run_id: string };
    expect(parsed.run_id).toBe(results.run_id);
  }, 180_000);
});

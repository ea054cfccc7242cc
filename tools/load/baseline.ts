/**
 * `--baseline pinned`: the problem the global claim solves (work pinned to the host that received the
 * connection) against this runtime's global claim, on the same stack and the same workload.
 *
 * The runtime has no pinning, so the pinned side is a client-side simulation, stated plainly:
 * every virtual user is assigned a "receiving host" (a skewed share to the first host, the way a
 * sticky load balancer piles long-lived connections onto one node), and each host's work may use
 * only that host's HOST_MAX_RUNS slots: the client keeps one gate of C slots per receiving host
 * and submits a user's job only when its host has a free slot. Which host physically executes a
 * submitted job is still decided by the global claim; since the hosts are identical and the
 * runtime never holds more than H×C of these jobs, the gate reproduces exactly the queueing a
 * pinned design has: work waits for its own host while other hosts sit idle.
 * The global side submits every job at once and lets any idle host claim it.
 * Both sides measure from the users' common arrival time.
 */
import { performance } from "node:perf_hooks";
import { sleep } from "../../src/domain/async";
import { dist, round } from "../lib/stats";
import type { Progress } from "./progress";
import type { Sampler } from "./sampler";
import type { BaselineResult, ModelScript, ModeResult, RunRecord, Target } from "./types";
import { runVu } from "./vu";

export interface BaselineOptions {
  mode: "pinned";
  /** Jobs per mode (default 2 × hosts × capacity). */
  jobs?: number;
  /** Share of users whose connection landed on the first host (default 0.5). */
  skew: number;
  /** Slots per host (HOST_MAX_RUNS); known when self-started, else this or 8. */
  hostCapacity?: number;
}

interface Ctx {
  script: ModelScript;
  runTimeoutMs: number;
}

export async function runBaseline(
  target: Target,
  sampler: Sampler,
  progress: Progress,
  opts: Ctx & { baseline?: BaselineOptions | null },
  runId: string,
  knownCapacity: number | null,
): Promise<BaselineResult> {
  const b = opts.baseline as BaselineOptions;
  const hosts = target.hosts().map((h) => h.id);
  if (hosts.length < 2)
    throw new Error("--baseline pinned needs at least 2 sandbox-hosts (e.g. --self-start --hosts 4)");
  const capacity = b.hostCapacity ?? knownCapacity ?? 8;
  const jobs = b.jobs ?? 2 * hosts.length * capacity;
  const receiving: number[] = [];
  const first = Math.round(jobs * b.skew);
  for (let i = 0; i < jobs; i++) receiving.push(i < first ? 0 : 1 + ((i - first) % (hosts.length - 1)));
  const assignment: Record<string, number> = {};
  for (const r of receiving) assignment[hosts[r] as string] = (assignment[hosts[r] as string] ?? 0) + 1;

  const modes: ModeResult[] = [];
  const allRuns: RunRecord[] = [];
  for (const mode of ["pinned (simulated)", "global claim"] as const) {
    progress.begin(`[baseline ${mode} ×${jobs}]`, jobs);
    const step = mode === "global claim" ? 90_001 : 90_000; // distinct ids in conversation names
    const window = sampler.startWindow();
    const arrival = performance.now();
    const gateWait: number[] = [];
    const one = async (vu: number): Promise<RunRecord> => {
      gateWait.push(performance.now() - arrival);
      const r = await runVu(
        {
          target,
          script: opts.script,
          runTimeoutMs: opts.runTimeoutMs,
          runId,
          step,
          metadata: { baseline: mode, receiving_host: hosts[receiving[vu] as number] },
        },
        vu,
        "text",
        arrival,
      );
      progress.finished(r.ok);
      return r;
    };
    let records: RunRecord[];
    if (mode === "global claim") {
      records = await Promise.all(receiving.map((_, vu) => one(vu)));
    } else {
      const queues = hosts.map((_, h) => receiving.flatMap((r, vu) => (r === h ? [vu] : [])));
      const out: RunRecord[] = [];
      await Promise.all(
        queues.flatMap((q) =>
          Array.from({ length: capacity }, async () => {
            for (let vu = q.shift(); vu !== undefined; vu = q.shift()) out.push(await one(vu));
          }),
        ),
      );
      records = out;
    }
    const makespanMs = performance.now() - arrival;
    const resources = await window.stop();
    const ranOn: Record<string, number> = {};
    for (const r of records) if (r.host) ranOn[r.host] = (ranOn[r.host] ?? 0) + 1;
    const res: ModeResult = {
      mode,
      runs: records.length,
      strictOk: records.filter((r) => r.ok).length,
      makespanMs: Math.round(makespanMs),
      throughputPerS: round(records.length / (makespanMs / 1000), 2) as number,
      latency: dist(records.map((r) => r.client.totalMs)),
      gateWait: dist(gateWait),
      dispatch: dist(records.map((r) => r.server?.dispatch_latency_ms ?? null)),
      ranOn,
      runsActivePeakByHost: Object.fromEntries(resources.hosts.map((h) => [h.id, h.runsActivePeak])),
      resources,
    };
    modes.push(res);
    allRuns.push(...records);
    progress.end(
      `${res.strictOk}/${res.runs} strict ok, makespan ${res.makespanMs} ms, ${res.throughputPerS} runs/s, p95 ${Math.round(res.latency.p95 ?? 0)} ms`,
    );
    // Let the hosts drain before the other mode.
    for (let i = 0; i < 120; i++) {
      const s = await sampler.snapshot();
      if (s.hosts.every((h) => !h.runsActive)) break;
      await sleep(250);
    }
  }
  return {
    method:
      "pinned = client-side simulation: one gate of HOST_MAX_RUNS slots per receiving host, jobs submitted only " +
      "through their own host's gate; global = every job submitted at once, any idle host claims it. " +
      "Latency is measured from the users' common arrival time.",
    hosts,
    capacityPerHost: capacity,
    jobs,
    skew: b.skew,
    assignment,
    modes,
    strictOk: modes.every((m) => m.strictOk === m.runs),
    runs: allRuns,
  };
}

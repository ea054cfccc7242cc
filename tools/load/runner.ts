/**
 * The ladder: for each scenario and each step, N virtual users submit at once (each with its own
 * conversation), stream, and read back their terminal state while the sampler records resource
 * peaks. Between steps it waits for the hosts to drain; after the ladder it waits for every
 * resource to return to its pre-run baseline and records whether it did.
 */
import { randomBytes } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { LABEL_HOST, LABEL_SANDBOX } from "../../sandbox-host/sandbox/manager";
import { dist, round } from "../lib/stats";
import { type BaselineOptions, runBaseline } from "./baseline";
import { stepBottleneck, stepBreakdown } from "./breakdown";
import { autoClientProcs, ClientPool, splitVus } from "./clients";
import { startLoopDelay } from "./loop-delay";
import { ProcCpuSampler } from "./proc-cpu";
import { Progress } from "./progress";
import { renderReport } from "./report";
import { Sampler, type Snapshot } from "./sampler";
import { type ResolvedTarget, resolveTarget, type TargetOptions } from "./target";
import type {
  BaselineResult,
  LoadResults,
  LoopDelay,
  ModelScript,
  Peaks,
  RunRecord,
  Scenario,
  SettleCheck,
  StepCpu,
  StepResult,
  Target,
  TargetCheck,
} from "./types";
import { emptyRecord, runVu } from "./vu";

export interface LoadOptions extends TargetOptions {
  steps: number[];
  scenarios: Scenario[];
  script: ModelScript;
  runTimeoutMs: number;
  /** How long to wait for resources to return to baseline after the run. */
  settleMs: number;
  /** Results go to `<outRoot>/<timestamp>/`. */
  outRoot?: string;
  progress: boolean;
  baseline?: BaselineOptions | null;
  /** Skip the ladder (baseline mode only). */
  skipLadder?: boolean;
  /**
   * Client processes a step's VUs run in: 0 = inside this process, N = N forked clients;
   * "auto" (default) = autoClientProcs(step).
   */
  clientProcs?: number | "auto";
}

export interface LoadOutcome {
  results: LoadResults;
  dir: string;
  resultsPath: string;
  reportPath: string;
  /** Every run strictly successful and every resource back to baseline. */
  ok: boolean;
}

const stamp = () => new Date().toISOString().replace(/[:.]/g, "-").replace(/Z$/, "");

export async function runLoad(opts: LoadOptions): Promise<LoadOutcome> {
  const root = resolve(opts.root);
  const dir = join(resolve(opts.outRoot ?? join(root, ".load-results")), stamp());
  await mkdir(dir, { recursive: true });
  const progress = new Progress(opts.progress);
  const runId = randomBytes(4).toString("hex");
  const startedAt = new Date().toISOString();
  const notes: string[] = [];

  const resolved = await resolveTarget(opts, opts.script, dir);
  const { target } = resolved;
  const sampler = new Sampler({ redisUrl: target.redisUrl, databaseUrl: target.databaseUrl, hosts: target.hosts });
  const clients = new ClientPool(root);
  const cpu = cpuSampler(resolved, clients);
  const steps: StepResult[] = [];
  const runs: RunRecord[] = [];
  let baselineResult: BaselineResult | null = null;
  let settle: LoadResults["settle"] = { ok: false, waited_ms: 0, readyz: null, checks: [] };
  let stackHostIds: string[] = [];
  try {
    progress.note(`load run ${runId} against ${target.gatewayUrl} (${target.source}); results in ${dir}`);
    await resolved.refresh();
    if (target.hosts().length === 0)
      notes.push("no host metrics URLs known: host RSS, runs_active and lag not sampled");
    const before = await sampler.snapshot();

    if (!opts.skipLadder) {
      for (const scenario of opts.scenarios) {
        for (const n of opts.steps) {
          await resolved.refresh();
          await drain(sampler, before, opts.settleMs);
          const step = await runStep(target, sampler, cpu, clients, progress, opts, runId, scenario, n);
          steps.push(step.result);
          runs.push(...step.runs);
          progress.end(
            `${step.result.strictOk}/${step.result.runs} strict ok, prep p95 ${fmt(step.result.client.preparation.p95)} ms, ` +
              `total p95 ${fmt(step.result.client.total.p95)} ms, dispatch p95 ${fmt(step.result.server.dispatch.p95)} ms; ` +
              `${step.result.bottleneck.busiest ?? "no CPU figures"}; load ${step.result.resources.loadavg1Peak.toFixed(1)}`,
          );
        }
      }
    }
    if (opts.baseline) {
      await drain(sampler, before, opts.settleMs);
      baselineResult = await runBaseline(target, sampler, progress, opts, runId, resolved.hostCapacity);
      for (const r of baselineResult.runs) delete r.eventPathSamples;
      runs.push(...baselineResult.runs);
    }
    settle = await settleCheck(target, sampler, before, opts.settleMs, progress);
  } finally {
    await clients.close();
    notes.push(...sampler.notes);
    await sampler.close();
    if (resolved.stack) {
      stackHostIds = target.hosts().map((h) => h.id);
      progress.note("stopping the self-started stack…");
      await resolved.close();
    }
  }
  if (resolved.stack) {
    // Containers/networks are removed by the hosts as they stop; confirm nothing of ours is left.
    const leftovers = await dockerLeftovers(stackHostIds);
    if (leftovers) {
      notes.push(`after stopping the stack: ${leftovers}`);
      settle.ok = false;
    }
  }

  const results: LoadResults = {
    tool: "ear-load",
    version: 1,
    run_id: runId,
    started_at: startedAt,
    finished_at: new Date().toISOString(),
    target: { source: target.source, gateway_url: target.gatewayUrl, hosts: target.hosts().map((h) => h.id) },
    config: {
      steps: opts.steps,
      scenarios: opts.scenarios,
      script: opts.script,
      run_timeout_ms: opts.runTimeoutMs,
      settle_ms: opts.settleMs,
      client_procs: opts.clientProcs ?? "auto",
    },
    steps,
    targets: evaluateTargets(steps),
    baseline_mode: baselineResult ? { ...baselineResult, runs: [] } : null,
    settle,
    notes,
    runs,
  };
  const resultsPath = join(dir, "results.json");
  const reportPath = join(dir, "report.html");
  await writeFile(resultsPath, `${JSON.stringify(results, null, 2)}\n`);
  await writeFile(reportPath, renderReport(results));
  const ok = steps.every((s) => s.strictOk === s.runs) && (baselineResult?.strictOk ?? true) && settle.ok;
  return { results, dir, resultsPath, reportPath, ok };
}

const fmt = (x: number | null) => (x === null ? "–" : String(Math.round(x)));

/** Which processes are the stack's, re-read at each sample (a host may join mid-run). */
function cpuSampler(resolved: ResolvedTarget, clients: ClientPool): ProcCpuSampler {
  return new ProcCpuSampler(() => {
    const p = resolved.procs();
    const known = new Map<number, string>([...p.hosts, ...clients.pids()]);
    known.set(process.pid, "load parent");
    if (p.root !== null && p.root !== process.pid && p.rootPart) known.set(p.root, p.rootPart);
    return {
      roots: p.root === null ? [] : [p.root, process.pid, ...p.hosts.keys()],
      known,
      source:
        p.root === null
          ? "a scan of every process on this machine whose command line names a part of the stack (another stack here counts too)"
          : p.root === process.pid
            ? "the self-started stack: this process and its descendants"
            : `the stack's process ${p.root} (.dev/stack.json) and its descendants, its hosts, and this process`,
    };
  });
}

/** A strict failure for a VU whose client process could not report it. */
function lostRecord(scenario: Scenario, n: number, runId: string, vu: number, why: string): RunRecord {
  return { ...emptyRecord(n, vu, scenario, `load-${runId}-s${n}-v${vu}`), problems: [`client: ${why}`] };
}

async function runStep(
  target: Target,
  sampler: Sampler,
  cpu: ProcCpuSampler,
  clients: ClientPool,
  progress: Progress,
  opts: LoadOptions,
  runId: string,
  scenario: Scenario,
  n: number,
): Promise<{ result: StepResult; runs: RunRecord[] }> {
  const procs = opts.clientProcs === undefined || opts.clientProcs === "auto" ? autoClientProcs(n) : opts.clientProcs;
  const shares = procs > 0 ? splitVus(n, procs) : [];
  // Forked before the window opens: a client's start-up (tsx compiling the entry) is not the step's.
  if (shares.length) await clients.ensure(shares.length);
  progress.begin(`[${scenario} ×${n}${shares.length ? ` in ${shares.length} client procs` : ""}]`, n);
  const window = sampler.startWindow();
  const cpuWindow = await cpu.startWindow();
  const parentLoop = startLoopDelay();
  const t0 = performance.now();
  const opened = new Set<number>();
  const onOpen = (v: number) => {
    if (!opened.has(v)) {
      opened.add(v);
      progress.streamOpened();
    }
  };
  let records: RunRecord[];
  let loops: LoopDelay[] = [];
  if (shares.length) {
    const out = await clients.run(
      {
        gatewayUrl: target.gatewayUrl,
        apiKey: target.apiKey,
        script: opts.script,
        runTimeoutMs: opts.runTimeoutMs,
        runId,
        step: n,
        scenario,
      },
      shares,
      onOpen,
      (r) => progress.finished(r.ok),
      (vu, why) => lostRecord(scenario, n, runId, vu, why),
    );
    records = out.records;
    loops = out.loops;
  } else {
    records = await Promise.all(
      Array.from({ length: n }, (_, vu) =>
        runVu(
          { target, script: opts.script, runTimeoutMs: opts.runTimeoutMs, runId, step: n, onEvent: onOpen },
          vu,
          scenario,
        ).then((r) => {
          progress.finished(r.ok);
          return r;
        }),
      ),
    );
  }
  const wallMs = performance.now() - t0;
  const parentFigures = parentLoop.stop();
  const [resources, cpuUse] = await Promise.all([window.stop(), cpuWindow.stop()]);
  if (cpuUse && !cpuUse.parts.some((p) => /bridge|mock model/.test(p.part))) {
    cpuUse.source += `; the bridges and the mock model have no process of their own: they run inside ${
      cpuUse.parts.some((p) => p.part === "dev stack process") ? "the dev stack process" : "the load parent"
    } and count there`;
  }
  loops.unshift({
    proc: shares.length ? "load parent" : "load parent (runs the VUs)",
    pid: process.pid,
    vus: shares.length ? 0 : n,
    ...parentFigures,
  });
  const result = summarizeStep(scenario, n, records, wallMs, resources, {
    clientProcs: shares.length,
    loops,
    cpu: cpuUse,
  });
  for (const r of records) delete r.eventPathSamples;
  return { result, runs: records };
}

export function summarizeStep(
  scenario: Scenario,
  n: number,
  records: RunRecord[],
  wallMs: number,
  resources: Peaks,
  measured: { clientProcs: number; loops: LoopDelay[]; cpu: StepCpu | null } = { clientProcs: 0, loops: [], cpu: null },
): StepResult {
  const breakdown = stepBreakdown(records);
  const failures: Record<string, number> = {};
  for (const r of records) {
    if (r.ok) continue;
    const key =
      r.problems[0]
        ?.replace(/\b[0-9a-f]{8}-[0-9a-f-]{27}\b/g, "<id>")
        .replace(/\d{4,}/g, "#")
        .slice(0, 200) ?? "unknown";
    failures[key] = (failures[key] ?? 0) + 1;
  }
  const hostsUsed: Record<string, number> = {};
  for (const r of records) if (r.host) hostsUsed[r.host] = (hostsUsed[r.host] ?? 0) + 1;
  const s = (k: keyof NonNullable<RunRecord["server"]>) => records.map((r) => r.server?.[k] ?? null);
  return {
    concurrency: n,
    scenario,
    runs: records.length,
    strictOk: records.filter((r) => r.ok).length,
    runsRecovered: records.filter((r) => r.recoveries > 0).length,
    turnsAskedAgain: records.reduce((n, r) => n + r.turnsAskedAgain, 0),
    connectionRetries: records.reduce((n, r) => n + r.connectionRetries, 0),
    wallMs: Math.round(wallMs),
    throughputPerS: round(records.length / (wallMs / 1000), 2) as number,
    failures,
    client: {
      submit: dist(records.map((r) => r.client.submitMs)),
      preparation: dist(records.map((r) => r.client.preparationMs)),
      firstToken: dist(records.map((r) => r.client.firstTokenMs)),
      total: dist(records.map((r) => r.client.totalMs)),
      cancel: dist(records.map((r) => r.client.cancelMs)),
    },
    server: {
      dispatch: dist(s("dispatch_latency_ms")),
      preparation: dist(s("preparation_latency_ms")),
      modelFirstOutput: dist(s("model_first_output_latency_ms")),
      firstOutput: dist(s("first_output_latency_ms")),
      total: dist(s("total_latency_ms")),
    },
    hostsUsed,
    resources,
    breakdown,
    clientProcs: measured.clientProcs,
    loops: measured.loops,
    cpu: measured.cpu,
    bottleneck: stepBottleneck(breakdown, measured.cpu),
  };
}

const sumRunsActive = (s: Snapshot) => s.hosts.reduce((a, h) => a + (h.runsActive ?? 0), 0);

/** Between steps: hosts idle and sandboxes gone (bounded wait). */
async function drain(sampler: Sampler, before: Snapshot, maxMs: number): Promise<void> {
  const until = Date.now() + maxMs;
  for (;;) {
    const s = await sampler.snapshot();
    const idle = sumRunsActive(s) === 0 && (s.containers ?? 0) <= (before.containers ?? 0);
    if (idle || Date.now() > until) return;
    await sleep(250);
  }
}

const lessPolls = (s: Snapshot): number | null =>
  s.redisClients === null ? null : s.redisClients - (s.redisWakePolls ?? 0);

/** After everything: wait (bounded) until each resource is back to its pre-run value. */
async function settleCheck(
  target: Target,
  sampler: Sampler,
  before: Snapshot,
  maxMs: number,
  progress: Progress,
): Promise<LoadResults["settle"]> {
  const t0 = Date.now();
  progress.note(`waiting up to ${Math.round(maxMs / 1000)} s for every resource to return to its baseline…`);
  const PG_TOL = 3;
  const REDIS_TOL = 2;
  let checks: SettleCheck[] = [];
  for (;;) {
    const s = await sampler.snapshot();
    const c = (name: string, b: number | null, a: number | null, tol: number): SettleCheck => ({
      name,
      before: b,
      after: a,
      tolerance: tol,
      ok: b === null || a === null ? a === b : a <= b + tol,
    });
    checks = [
      { name: "runs_active (all hosts)", before: 0, after: sumRunsActive(s), tolerance: 0, ok: sumRunsActive(s) === 0 },
      c("sandbox containers", before.containers, s.containers, 0),
      c("sandbox networks", before.networks, s.networks, 0),
      c("postgres sessions", before.pgTotal, s.pgTotal, PG_TOL),
      // Hosts that went to sleep after the run wait on a BLPOP each, on a connection of their own
      // (two for a moment, between a reply and the next wait): not a leak, bounded apart.
      c("redis connected clients (besides wake-polls)", lessPolls(before), lessPolls(s), REDIS_TOL),
      c(
        "redis wake-poll connections (two per host at most)",
        s.redisWakePolls === null ? null : 0,
        s.redisWakePolls,
        2 * s.hosts.length,
      ),
      {
        name: "hosts answering /metrics",
        before: before.hosts.filter((h) => h.ok).length,
        after: s.hosts.filter((h) => h.ok).length,
        tolerance: 0,
        ok: s.hosts.every((h) => h.ok),
      },
    ];
    if (checks.every((x) => x.ok) || Date.now() - t0 > maxMs) break;
    await sleep(500);
  }
  let readyz: number | null = null;
  try {
    readyz = (await fetch(`${target.gatewayUrl}/readyz`, { signal: AbortSignal.timeout(5000) })).status;
  } catch {}
  const ok = checks.every((x) => x.ok) && readyz === 200;
  return { ok, waited_ms: Date.now() - t0, readyz, checks };
}

/**
 * Sandboxes of the stopped stack's hosts still on the Docker engine. Only theirs: the engine is
 * shared with whatever else runs on the machine (the integration suite runs two files at once,
 * other checkouts test too), whose sandboxes are not this run's leftovers.
 */
async function dockerLeftovers(hostIds: string[]): Promise<string | null> {
  try {
    const Docker = (await import("dockerode")).default;
    const docker = new Docker();
    const filters = { label: [`${LABEL_SANDBOX}=1`] };
    const [allCs, allNs] = await Promise.all([
      docker.listContainers({ all: true, filters }),
      docker.listNetworks({ filters }),
    ]);
    const ours = (labels: Record<string, string> | undefined) => hostIds.includes(labels?.[LABEL_HOST] ?? "");
    const cs = allCs.filter((c) => ours(c.Labels));
    const ns = allNs.filter((n) => ours(n.Labels));
    return cs.length || ns.length ? `${cs.length} sandbox containers and ${ns.length} networks left` : null;
  } catch {
    return null;
  }
}

/** The load targets (each check's name and limit below), judged per scenario over its whole ladder. */
export function evaluateTargets(steps: StepResult[]): TargetCheck[] {
  const out: TargetCheck[] = [];
  const scenarios = [...new Set(steps.map((s) => s.scenario))];
  for (const scenario of scenarios) {
    const ss = steps.filter((s) => s.scenario === scenario);
    const top = ss.reduce((a, b) => (b.concurrency > a.concurrency ? b : a));
    out.push({
      scenario,
      name: `strict success at step ${top.concurrency}`,
      limit: `${top.runs}/${top.runs}`,
      measured: `${top.strictOk}/${top.runs}`,
      ok: top.strictOk === top.runs,
    });
    const worst = (f: (s: StepResult) => number | null) => {
      const v = ss.map(f).filter((x): x is number => x !== null);
      return v.length ? Math.max(...v) : null;
    };
    const disp = worst((s) => s.server.dispatch.p95);
    out.push({
      scenario,
      name: "server dispatch p95 (worst step)",
      limit: "≤ 250 ms",
      measured: `${fmt(disp)} ms`,
      ok: disp !== null && disp <= 250,
    });
    const prep = worst((s) => s.client.preparation.p95);
    out.push({
      scenario,
      name: "client preparation p95 (worst step)",
      limit: "≤ 500 ms",
      measured: `${fmt(prep)} ms`,
      ok: prep !== null && prep <= 500,
    });
    const redis = ss.map((s) => s.resources.redisClientsPeak).filter((x): x is number => x !== null);
    const spread = redis.length ? Math.max(...redis) - Math.min(...redis) : null;
    out.push({
      scenario,
      name: "Redis connections flat as runs grow (peak spread over steps)",
      limit: "≤ 3 clients",
      measured: spread === null ? "not sampled" : `${Math.min(...redis)}–${Math.max(...redis)} (spread ${spread})`,
      ok: spread !== null && spread <= 3,
    });
    const lag = worst((s) => s.resources.lagP99UpperMs);
    out.push({
      scenario,
      name: "host event-loop lag p99 (bucket upper bound, worst host, worst step)",
      limit: "≤ 50 ms",
      measured: lag === null ? "not sampled" : `≤ ${lag} ms`,
      ok: lag !== null && lag <= 50,
    });
  }
  return out;
}

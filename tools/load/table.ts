/** The summary table (terminal and Markdown) from results.json. */

import type { Dist } from "../lib/stats";
import { textTable } from "../lib/table";
import type { LoadResults, StepResult } from "./types";

const ms = (x: number | null) => (x === null ? "–" : x >= 10_000 ? `${(x / 1000).toFixed(1)}s` : `${Math.round(x)}`);
const d = (x: Dist) => `${ms(x.p50)}/${ms(x.p95)}/${ms(x.max)}`;
const n = (x: number | null) => (x === null ? "–" : String(x));
const mib = (x: number | null) => (x === null ? "–" : `${Math.round(x / 1048576)}`);
const d2 = (x: Dist) => `${ms(x.p50)}/${ms(x.p95)}`;
const load = (s: StepResult) => `${s.resources.loadavg1Peak.toFixed(1)} / ${s.resources.cores} cores`;

/** Per step, where the runs' time went (breakdown.ts): p50/p95 ms of each part. */
export function breakdownRows(r: LoadResults): string[][] {
  const head = [
    "scenario",
    "VUs",
    "client setup",
    "submit (client)",
    "submit→insert",
    "insert→answer",
    "stream req→head",
    "head→1st event",
    "event emit→recv p50/p95/max",
    "1st event emit→recv",
    "terminal emit→recv",
    "row finished→terminal recv",
    "outbox backlog peak",
    "preparation: largest parts",
    "bottleneck (CPU)",
    "machine load 1m peak",
  ];
  const rows = r.steps.map((s) => {
    const b = s.breakdown;
    return [
      s.scenario,
      String(s.concurrency),
      d2(b.submit.clientSetup),
      d2(b.submit.roundTrip),
      d2(b.submit.toInsert),
      d2(b.submit.insertToAnswer),
      d2(b.stream.headers),
      d2(b.stream.headersToFirstEvent),
      d(b.events.emitToReceive),
      d2(b.events.firstEvent),
      d2(b.events.terminal),
      d2(b.events.finishedToReceive),
      n(s.resources.outboxBacklogPeak),
      b.preparationShares
        .slice(0, 2)
        .map((x) => `${x.part} ${Math.round(x.share * 100)} %`)
        .join(", ") || "–",
      [s.bottleneck.busiest, s.bottleneck.starved, s.bottleneck.machine].filter(Boolean).join("; ") || "–",
      load(s),
    ];
  });
  return [head, ...rows];
}

/** Per step, inside the gateway (its Server-Timing headers): p50/p95 ms of the handler and its waits. */
export function gatewayRows(r: LoadResults): string[][] | null {
  const steps = r.steps.filter((s) => s.breakdown.gateway?.submitApp.n);
  if (!steps.length) return null;
  const head = [
    "scenario",
    "VUs",
    "submit: in gateway",
    "outside it",
    "its pg waits",
    "pg calls",
    "rate-limit check",
    "stream open: in gateway",
    "outside it",
    "its DO waits",
    "its pg waits",
    "read-back GET (verification)",
  ];
  const rows = steps.map((s) => {
    const g = s.breakdown.gateway;
    return [
      s.scenario,
      String(s.concurrency),
      d2(g.submitApp),
      d2(g.submitOutside),
      d2(g.submitPg),
      `${g.submitPgCalls.p50 ?? "–"}`,
      d2(g.submitRateLimit),
      d2(g.streamApp),
      d2(g.streamOutside),
      d2(g.streamDo),
      d2(g.streamPg),
      d2(g.readBack),
    ];
  });
  return [head, ...rows];
}

/** Per step, CPU cores used by each part of the stack (proc-cpu.ts), busiest first over the run. */
export function cpuRows(r: LoadResults): string[][] | null {
  const withCpu = r.steps.filter((s) => s.cpu);
  if (!withCpu.length) return null;
  const totals = new Map<string, number>();
  for (const s of withCpu) for (const p of s.cpu?.parts ?? []) totals.set(p.part, (totals.get(p.part) ?? 0) + p.cpuMs);
  const parts = [...totals].sort((a, b) => b[1] - a[1]).map(([p]) => p);
  const head = [
    "scenario",
    "VUs",
    ...parts.map((p) => `${p} used/waited`),
    "stack used/waited",
    "machine busy (all processes)",
    "machine load 1m peak",
  ];
  const rows = withCpu.map((s) => [
    s.scenario,
    String(s.concurrency),
    ...parts.map((p) => {
      const x = s.cpu?.parts.find((q) => q.part === p);
      return x ? `${x.cores.toFixed(2)}/${x.waitingCores.toFixed(2)}` : "–";
    }),
    `${(s.cpu?.totalCores ?? 0).toFixed(2)}/${(s.cpu?.parts ?? []).reduce((a, p) => a + p.waitingCores, 0).toFixed(2)}`,
    s.cpu?.machineBusyCores === null || s.cpu?.machineBusyCores === undefined
      ? "–"
      : `${s.cpu.machineBusyCores.toFixed(2)} of ${s.resources.cores}`,
    load(s),
  ]);
  return [head, ...rows];
}

/** Per step, every load process's event-loop delay: the load tool showing it is not the bottleneck. */
export function loopRows(r: LoadResults): string[][] {
  const head = ["scenario", "VUs", "process", "pid", "VUs in it", "loop delay p50/p99/max ms"];
  const f = (x: number | null) => (x === null ? "–" : x >= 100 ? String(Math.round(x)) : x.toFixed(1));
  const rows = r.steps.flatMap((s) =>
    s.loops.map((l) => [
      s.scenario,
      String(s.concurrency),
      l.proc,
      String(l.pid),
      String(l.vus),
      `${f(l.p50Ms)}/${f(l.p99Ms)}/${f(l.maxMs)}`,
    ]),
  );
  return [head, ...rows];
}

export function summaryRows(r: LoadResults): string[][] {
  const head = [
    "scenario",
    "VUs",
    "strict ok",
    "client prep p50/p95/max ms",
    "client 1st token p50/p95/max",
    "client total p50/p95/max",
    "server dispatch p50/p95/max",
    "server total p50/p95/max",
    "redis clients peak",
    "pg sessions peak (active)",
    "containers/networks peak",
    "host RSS peak MiB",
    "loop lag p99≤ / max≤ ms",
    "machine load 1m peak",
  ];
  const rows = r.steps.map((s) => [
    s.scenario,
    String(s.concurrency),
    `${s.strictOk}/${s.runs}${s.runsRecovered ? ` (${s.runsRecovered} recovered)` : ""}${s.connectionRetries ? ` (${s.connectionRetries} GETs resent)` : ""}`,
    d(s.client.preparation),
    d(s.client.firstToken),
    d(s.client.total),
    d(s.server.dispatch),
    d(s.server.total),
    n(s.resources.redisClientsPeak),
    `${n(s.resources.pgTotalPeak)} (${n(s.resources.pgActivePeak)})`,
    `${n(s.resources.containersPeak)}/${n(s.resources.networksPeak)}`,
    mib(s.resources.rssPeakBytes),
    `${n(s.resources.lagP99UpperMs)} / ${n(s.resources.lagMaxBucketMs)}`,
    `${s.resources.loadavg1Peak.toFixed(1)} / ${s.resources.cores} cores`,
  ]);
  return [head, ...rows];
}

export function baselineRows(r: LoadResults): string[][] | null {
  const b = r.baseline_mode;
  if (!b) return null;
  return [
    [
      "mode",
      "jobs",
      "strict ok",
      "makespan ms",
      "runs/s",
      "latency p50/p95/max ms",
      "gate wait p95",
      "dispatch p95",
      "ran on (host: jobs)",
    ],
    ...b.modes.map((m) => [
      m.mode,
      String(m.runs),
      `${m.strictOk}/${m.runs}`,
      String(m.makespanMs),
      String(m.throughputPerS),
      d(m.latency),
      ms(m.gateWait.p95),
      ms(m.dispatch.p95),
      Object.entries(m.ranOn)
        .map(([h, c]) => `${h.slice(-6)}:${c}`)
        .join(" "),
    ]),
  ];
}

export function summaryText(r: LoadResults): string {
  const parts = [textTable(summaryRows(r))];
  if (r.steps.length) {
    parts.push(
      "\nwhere the time went (ms, p50/p95; clocks: client, host event `ts`, Postgres timing facts, one machine)",
    );
    parts.push(textTable(breakdownRows(r)));
    const gw = gatewayRows(r);
    if (gw) {
      parts.push(
        "\ninside the gateway (its Server-Timing headers; ms, p50/p95): the handler's wall time, the client's time outside it (waiting for workerd to read the request, and the answer's way back), and the handler's waits",
      );
      parts.push(textTable(gw));
    }
    const cpu = cpuRows(r);
    if (cpu) {
      parts.push(
        `\nCPU per part of the stack during each step, in cores: used = CPU time / step wall time, waited = time its threads were runnable with no CPU free / wall time (${r.steps[0]?.cpu?.source ?? ""})`,
      );
      parts.push(textTable(cpu));
    }
    parts.push("\nevent-loop delay of the load processes (monitorEventLoopDelay, 10 ms resolution)");
    parts.push(textTable(loopRows(r)));
    const missing = r.steps[0]?.breakdown.missing ?? [];
    if (missing.length)
      parts.push(`\nnot exposed by the stack, so not split:\n${missing.map((m) => `  - ${m}`).join("\n")}`);
  }
  const b = baselineRows(r);
  if (b && r.baseline_mode) {
    const a = Object.entries(r.baseline_mode.assignment)
      .map(([h, c]) => `${h.slice(-6)}:${c}`)
      .join(" ");
    parts.push(
      `\nbaseline (${r.baseline_mode.hosts.length} hosts × ${r.baseline_mode.capacityPerHost} slots; receiving hosts ${a})`,
    );
    parts.push(textTable(b));
  }
  if (r.targets.length) {
    parts.push("\ntargets");
    parts.push(
      textTable(
        r.targets.map((t) => [
          t.ok ? "PASS" : "MISS",
          t.scenario,
          t.name,
          `limit ${t.limit}`,
          `measured ${t.measured}`,
        ]),
      ),
    );
  }
  parts.push(
    `\nafter the run (${Math.round(r.settle.waited_ms / 1000)} s): ${r.settle.ok ? "everything back to baseline" : "NOT back to baseline"}; readyz ${r.settle.readyz ?? "unreachable"}`,
  );
  parts.push(
    textTable(
      r.settle.checks.map((c) => [
        c.ok ? "ok" : "NOT OK",
        c.name,
        `before ${n(c.before)}`,
        `after ${n(c.after)}`,
        `±${c.tolerance}`,
      ]),
    ),
  );
  for (const note of r.notes) parts.push(`note: ${note}`);
  return parts.join("\n");
}

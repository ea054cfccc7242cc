/** The summary table (terminal and Markdown) from results.json. */

import type { Dist } from "../lib/stats";
import { textTable } from "../lib/table";
import type { LoadResults } from "./types";

const ms = (x: number | null) => (x === null ? "–" : x >= 10_000 ? `${(x / 1000).toFixed(1)}s` : `${Math.round(x)}`);
const d = (x: Dist) => `${ms(x.p50)}/${ms(x.p95)}/${ms(x.max)}`;
const n = (x: number | null) => (x === null ? "–" : String(x));
const mib = (x: number | null) => (x === null ? "–" : `${Math.round(x / 1048576)}`);

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
    `${s.strictOk}/${s.runs}`,
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

/**
 * The offline HTML report: one file, no scripts, no external assets; charts are inline SVG
 * drawn here (latency against concurrency per scenario, resource peaks against concurrency,
 * baseline comparison).
 */

import { markdownTable } from "../lib/table";
import { baselineRows, breakdownRows, cpuRows, gatewayRows, loopRows, summaryRows } from "./table";
import type { LoadResults } from "./types";

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04"];

interface Series {
  name: string;
  values: Array<number | null>;
  dashed?: boolean;
}

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** What both charts share: the plot area, the y scale from the data, the svg head, title and y grid. */
function chartFrame(title: string, H: number, series: Series[]) {
  const W = 560;
  const L = 64;
  const R = 150;
  const T = 34;
  const B = 40;
  const pw = W - L - R;
  const ph = H - T - B;
  const all = series.flatMap((s) => s.values).filter((v): v is number => v !== null);
  const ymax = niceMax(all.length ? Math.max(...all) : 1);
  const y = (v: number) => T + ph - (v / ymax) * ph;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img">`,
    `<title>${esc(title)}</title><text x="${L}" y="20" font-size="14" font-weight="600">${esc(title)}</text>`,
  ];
  for (let k = 0; k <= 4; k++) {
    const v = (ymax * k) / 4;
    parts.push(
      `<line x1="${L}" x2="${L + pw}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e7eb"/>` +
        `<text x="${L - 6}" y="${y(v) + 4}" font-size="11" text-anchor="end">${esc(fmtNum(v))}</text>`,
    );
  }
  return { H, L, T, pw, ph, y, parts };
}

export function lineChart(title: string, xs: number[], series: Series[], unit: string): string {
  const { H, L, T, pw, ph, y, parts } = chartFrame(title, 300, series);
  // Concurrency steps are spaced evenly (1, 10, 20, 50, 100 would crowd on a linear axis).
  const x = (i: number) => L + (xs.length <= 1 ? pw / 2 : (i * pw) / (xs.length - 1));
  xs.forEach((xv, i) => {
    parts.push(`<text x="${x(i)}" y="${T + ph + 16}" font-size="11" text-anchor="middle">${xv}</text>`);
  });
  parts.push(
    `<text x="${L + pw / 2}" y="${H - 6}" font-size="11" text-anchor="middle">concurrent virtual users</text>` +
      `<text x="14" y="${T + ph / 2}" font-size="11" text-anchor="middle" transform="rotate(-90 14 ${T + ph / 2})">${esc(unit)}</text>` +
      `<line x1="${L}" x2="${L}" y1="${T}" y2="${T + ph}" stroke="#9ca3af"/><line x1="${L}" x2="${L + pw}" y1="${T + ph}" y2="${T + ph}" stroke="#9ca3af"/>`,
  );
  series.forEach((s, si) => {
    const color = COLORS[si % COLORS.length];
    const pts = s.values.map((v, i) => (v === null ? null : `${x(i).toFixed(1)},${y(v).toFixed(1)}`));
    const segs: string[][] = [[]];
    for (const p of pts) {
      if (p === null) segs.push([]);
      else segs[segs.length - 1]?.push(p);
    }
    for (const seg of segs) {
      if (seg.length > 1) {
        parts.push(
          `<polyline fill="none" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 4"' : ""} points="${seg.join(" ")}"/>`,
        );
      }
    }
    s.values.forEach((v, i) => {
      if (v !== null)
        parts.push(
          `<circle cx="${x(i)}" cy="${y(v)}" r="3" fill="${color}"><title>${esc(`${s.name} @${xs[i]}: ${fmtNum(v)} ${unit}`)}</title></circle>`,
        );
    });
    const ly = T + 6 + si * 16;
    parts.push(
      `<line x1="${L + pw + 10}" x2="${L + pw + 28}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 4"' : ""}/>` +
        `<text x="${L + pw + 32}" y="${ly + 4}" font-size="11">${esc(s.name)}</text>`,
    );
  });
  parts.push("</svg>");
  return parts.join("");
}

function barChart(title: string, groups: string[], series: Series[], unit: string): string {
  const { L, T, pw, ph, y, parts } = chartFrame(title, 260, series);
  const gw = pw / Math.max(1, groups.length);
  const bw = (gw * 0.7) / Math.max(1, series.length);
  groups.forEach((g, gi) => {
    parts.push(
      `<text x="${L + gi * gw + gw / 2}" y="${T + ph + 16}" font-size="11" text-anchor="middle">${esc(g)}</text>`,
    );
    series.forEach((s, si) => {
      const v = s.values[gi];
      if (v === null || v === undefined) return;
      const bx = L + gi * gw + gw * 0.15 + si * bw;
      parts.push(
        `<rect x="${bx}" y="${y(v)}" width="${bw - 2}" height="${T + ph - y(v)}" fill="${COLORS[si % COLORS.length]}"><title>${esc(`${s.name} ${g}: ${fmtNum(v)} ${unit}`)}</title></rect>`,
      );
    });
  });
  series.forEach((s, si) => {
    const ly = T + 6 + si * 16;
    parts.push(
      `<rect x="${L + pw + 10}" y="${ly - 5}" width="18" height="10" fill="${COLORS[si % COLORS.length]}"/><text x="${L + pw + 32}" y="${ly + 4}" font-size="11">${esc(s.name)}</text>`,
    );
  });
  parts.push(
    `<text x="14" y="${T + ph / 2}" font-size="11" text-anchor="middle" transform="rotate(-90 14 ${T + ph / 2})">${esc(unit)}</text>`,
  );
  parts.push("</svg>");
  return parts.join("");
}

function fmtNum(v: number): string {
  if (v >= 1000) return `${Math.round(v)}`;
  if (v >= 10) return v.toFixed(0);
  return String(Math.round(v * 100) / 100);
}

function htmlTable(rows: string[][], cls = ""): string {
  const [head, ...body] = rows;
  if (!head) return "";
  return `<table class="${cls}"><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${body
    .map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join("")}</tr>`)
    .join("")}</tbody></table>`;
}

export function renderReport(r: LoadResults): string {
  const sections: string[] = [];
  const scenarios = [...new Set(r.steps.map((s) => s.scenario))];
  for (const sc of scenarios) {
    const ss = r.steps.filter((s) => s.scenario === sc);
    const xs = ss.map((s) => s.concurrency);
    const charts = [
      lineChart(
        `${sc}: client latency (submit → …)`,
        xs,
        [
          { name: "preparation p50", values: ss.map((s) => s.client.preparation.p50), dashed: true },
          { name: "preparation p95", values: ss.map((s) => s.client.preparation.p95) },
          { name: "first token p50", values: ss.map((s) => s.client.firstToken.p50), dashed: true },
          { name: "first token p95", values: ss.map((s) => s.client.firstToken.p95) },
          { name: "total p50", values: ss.map((s) => s.client.total.p50), dashed: true },
          { name: "total p95", values: ss.map((s) => s.client.total.p95) },
        ],
        "ms",
      ),
      lineChart(
        `${sc}: server latency (API timing facts)`,
        xs,
        [
          { name: "dispatch p95", values: ss.map((s) => s.server.dispatch.p95) },
          { name: "preparation p95", values: ss.map((s) => s.server.preparation.p95) },
          { name: "model 1st out p95", values: ss.map((s) => s.server.modelFirstOutput.p95) },
          { name: "first output p95", values: ss.map((s) => s.server.firstOutput.p95) },
          { name: "total p95", values: ss.map((s) => s.server.total.p95) },
        ],
        "ms",
      ),
      lineChart(
        `${sc}: resource peaks`,
        xs,
        [
          { name: "runs active (sum)", values: ss.map((s) => s.resources.runsActivePeak) },
          { name: "redis clients", values: ss.map((s) => s.resources.redisClientsPeak) },
          { name: "pg sessions", values: ss.map((s) => s.resources.pgTotalPeak) },
          { name: "pg active", values: ss.map((s) => s.resources.pgActivePeak) },
          { name: "containers", values: ss.map((s) => s.resources.containersPeak) },
          { name: "networks", values: ss.map((s) => s.resources.networksPeak), dashed: true },
        ],
        "count",
      ),
      lineChart(
        `${sc}: host memory and event-loop lag`,
        xs,
        [
          {
            name: "RSS peak MiB",
            values: ss.map((s) => (s.resources.rssPeakBytes === null ? null : s.resources.rssPeakBytes / 1048576)),
          },
          { name: "lag p99 ≤ ms", values: ss.map((s) => s.resources.lagP99UpperMs) },
          { name: "lag max ≤ ms", values: ss.map((s) => s.resources.lagMaxBucketMs), dashed: true },
        ],
        "MiB / ms",
      ),
    ];
    const fails = ss.flatMap((s) => Object.entries(s.failures).map(([k, v]) => [String(s.concurrency), k, String(v)]));
    sections.push(
      `<h2>Scenario: ${esc(sc)}</h2><div class="charts">${charts.join("")}</div>` +
        (fails.length ? `<h3>Failures</h3>${htmlTable([["VUs", "first problem", "runs"], ...fails])}` : ""),
    );
  }
  if (r.baseline_mode) {
    const b = r.baseline_mode;
    const hosts = b.hosts;
    const rows = baselineRows(r) ?? [];
    sections.push(
      `<h2>Baseline: pinned (simulated) vs global claim</h2><p>${esc(b.method)}</p>` +
        `<p>${b.hosts.length} hosts × ${b.capacityPerHost} slots, ${b.jobs} jobs per mode, ${Math.round(b.skew * 100)} % of users on the first host. Receiving hosts: ${esc(
          Object.entries(b.assignment)
            .map(([h, c]) => `${h}: ${c}`)
            .join(", "),
        )}</p>${htmlTable(rows)}<div class="charts">${barChart(
          "jobs executed per host",
          hosts.map((h) => h.slice(-6)),
          b.modes.map((m) => ({ name: m.mode, values: hosts.map((h) => m.ranOn[h] ?? 0) })),
          "jobs",
        )}${barChart(
          "latency from arrival",
          ["p50", "p95", "max"],
          b.modes.map((m) => ({ name: m.mode, values: [m.latency.p50, m.latency.p95, m.latency.max] })),
          "ms",
        )}</div>`,
    );
  }
  const targets = r.targets.length
    ? htmlTable(
        [
          ["result", "scenario", "target", "limit", "measured"],
          ...r.targets.map((t) => [t.ok ? "PASS" : "MISS", t.scenario, t.name, t.limit, t.measured]),
        ],
        "targets",
      )
    : "";
  const settle = htmlTable([
    ["check", "before", "after", "tolerance", "ok"],
    ...r.settle.checks.map((c) => [
      c.name,
      String(c.before ?? "–"),
      String(c.after ?? "–"),
      `±${c.tolerance}`,
      c.ok ? "yes" : "NO",
    ]),
  ]);
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Load report ${esc(r.run_id)}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#111827;max-width:1400px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:12px}
th,td{border:1px solid #d1d5db;padding:3px 7px;text-align:left;white-space:nowrap}
th{background:#f3f4f6}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.charts svg{border:1px solid #e5e7eb;background:#fff}
.targets td:first-child{font-weight:600}
code{background:#f3f4f6;padding:1px 4px}
</style></head><body>
<h1>Load report <code>${esc(r.run_id)}</code></h1>
<p>${esc(r.started_at)} → ${esc(r.finished_at)} against <code>${esc(r.target.gateway_url)}</code> (${esc(r.target.source)}); hosts: ${esc(r.target.hosts.join(", ") || "none known")}.
Model script: ttft ${r.config.script.ttftMs} ms, ${r.config.script.tokensPerS} tokens/s, ${r.config.script.replyTokens}-word replies.</p>
<p>Client metrics start at the submit request: <b>preparation</b> = submit → first SSE event, <b>first token</b> = submit → first non-empty <code>model.delta</code>, <b>total</b> = submit → terminal event.
Server metrics are the job's own timing facts from <code>GET /v1/jobs/{id}</code>; the two are never mixed. Strict success = the stream's causal checks (ids contiguous, one terminal event, scenario events) and the authoritative terminal state with the scenario's meaning.
Lag figures are bucket bounds of <code>event_loop_lag_seconds</code> deltas over the step (p99 is an upper estimate; max is the highest bucket hit).</p>
<h2>Summary</h2>${htmlTable(summaryRows(r))}
<h2>Where the time went</h2><p>ms, p50/p95 unless said; the client's clock, the hosts' event <code>ts</code> and Postgres' timing facts are one machine's clock. Preparation shares are summed over the step's runs.</p>${htmlTable(breakdownRows(r))}
${(() => {
  const g = gatewayRows(r);
  return g
    ? `<h3>Inside the gateway</h3><p>From its Server-Timing headers: the handler's wall time, the client's time outside it, and the handler's waits (ms, p50/p95).</p>${htmlTable(g)}`
    : "";
})()}
${(() => {
  const c = cpuRows(r);
  return c
    ? `<h3>CPU per part of the stack</h3><p>Cores = CPU time (utime + stime, /proc) over the step's wall time; ${esc(r.steps[0]?.cpu?.source ?? "")}.</p>${htmlTable(c)}`
    : "";
})()}
<h3>Event-loop delay of the load processes</h3>${htmlTable(loopRows(r))}
${r.steps[0]?.breakdown.missing.length ? `<h3>Not exposed by the stack</h3><ul>${r.steps[0].breakdown.missing.map((m) => `<li>${esc(m)}</li>`).join("")}</ul>` : ""}
<h2>Targets</h2>${targets}
<h2>After the run</h2><p>${r.settle.ok ? "Every resource returned to its baseline" : "<b>Not everything returned to its baseline</b>"} (waited ${Math.round(r.settle.waited_ms / 1000)} s; readyz ${r.settle.readyz ?? "unreachable"}).</p>${settle}
${r.notes.length ? `<h2>Notes</h2><ul>${r.notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>` : ""}
${sections.join("\n")}
<h2>Markdown</h2><pre>${esc(markdownTable(summaryRows(r)))}</pre>
</body></html>
`;
}

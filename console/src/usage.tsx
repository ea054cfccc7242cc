/**
 * `#/usage`: spend and health at a glance, over a range picked from today, 7 or 30 days (UTC), all
 * from one GET /v1/usage (docs/api.md "Models, tools and usage"): jobs per hour by state, latency
 * percentiles, spend per day per agent and model against the tenant's daily budget, and the top
 * error codes. Each chart is an SVG with an accessible name and a table with the same numbers
 * under it ("as a table"), so nothing is only in the picture. The charts draw the API's numbers;
 * nothing is computed here but the layout.
 */
import { useEffect, useState } from "preact/hooks";
import { usd } from "./answer";
import { client } from "./api";
import { ListTable } from "./list";

type Usage = Awaited<ReturnType<typeof client.usage>>;

const RANGES = [
  ["1", "today"],
  ["7", "last 7 days"],
  ["30", "last 30 days"],
] as const;
const DAY_MS = 86_400_000;
const isoDay = (t: number) => new Date(t).toISOString().slice(0, 10);

/** A fixed colour per series, in the order the series appear (each meets 3:1 against white). */
const PALETTE = ["#1f5fbf", "#1d7a4a", "#a4262c", "#7a5a00", "#6b4fbb", "#0f6b73", "#a03a7a", "#575c66"];
const STATE_COLOURS: Record<string, string> = {
  completed: "#1d7a4a",
  failed: "#a4262c",
  running: "#1f5fbf",
  queued: "#575c66",
  waiting: "#9a6700",
  cancelled: "#3d3d3d",
  lost: "#6b4fbb",
  timed_out: "#c4561b",
  expired: "#a03a7a",
};

interface Stack {
  /** The x category's label (an hour or a day). */
  x: string;
  parts: Array<{ series: string; value: number }>;
}

/**
 * Stacked columns, one per category, with an optional horizontal line (the daily budget). The
 * SVG scales to its box (viewBox), so it fits a phone; labels are few (first and last category,
 * the top of the scale) because the table under it carries every number.
 */
function Columns({
  label,
  stacks,
  colour,
  line,
  format,
}: {
  label: string;
  stacks: Stack[];
  colour: (series: string) => string;
  line?: { value: number; label: string } | null;
  format: (v: number) => string;
}) {
  const W = 600;
  const H = 180;
  const top = Math.max(line?.value ?? 0, ...stacks.map((s) => s.parts.reduce((a, p) => a + p.value, 0)), 0) || 1;
  const band = W / Math.max(stacks.length, 1);
  const y = (v: number) => H - (v / top) * (H - 16);
  return (
    <svg viewBox={`0 0 ${W} ${H + 16}`} role="img" aria-label={label} class="chart" preserveAspectRatio="none">
      <line x1={0} x2={W} y1={H} y2={H} class="axis" />
      {stacks.map((s, i) => {
        let base = 0;
        return s.parts.map((p) => {
          const y0 = y(base);
          base += p.value;
          const y1 = y(base);
          return (
            <rect
              key={`${s.x}:${p.series}`}
              x={i * band + band * 0.1}
              width={Math.max(band * 0.8, 1)}
              y={y1}
              height={Math.max(y0 - y1, 0)}
              fill={colour(p.series)}
            >
              <title>{`${s.x} · ${p.series}: ${format(p.value)}`}</title>
            </rect>
          );
        });
      })}
      {line && (
        <g class="budget-line">
          <line x1={0} x2={W} y1={y(line.value)} y2={y(line.value)} />
          <text x={W - 4} y={y(line.value) - 3} text-anchor="end">
            {line.label}
          </text>
        </g>
      )}
      <text x={0} y={H + 13}>
        {stacks[0]?.x ?? ""}
      </text>
      <text x={W} y={H + 13} text-anchor="end">
        {stacks.length > 1 ? stacks.at(-1)?.x : ""}
      </text>
      <text x={2} y={11}>
        {format(top)}
      </text>
    </svg>
  );
}

/** Horizontal bars, one per row, labelled in HTML beside them (readable at any width). */
function Rows({
  label,
  rows,
  format,
  max,
}: {
  label: string;
  rows: Array<{ name: string; value: number | null; colour?: string }>;
  format: (v: number) => string;
  /** The value of a full-width bar: shared by the rows of one chart, so their lengths compare. */
  max: number;
}) {
  const top = max || 1;
  return (
    <svg
      viewBox={`0 0 300 ${rows.length * 18}`}
      role="img"
      aria-label={label}
      class="chart rows"
      preserveAspectRatio="none"
      style={{ height: `${rows.length * 18}px` }}
    >
      {rows.map((r, i) => (
        <rect
          key={r.name}
          x={0}
          y={i * 18 + 3}
          height={12}
          width={((r.value ?? 0) / top) * 300}
          fill={r.colour ?? PALETTE[0]}
        >
          <title>{`${r.name}: ${r.value === null ? "–" : format(r.value)}`}</title>
        </rect>
      ))}
    </svg>
  );
}

function Legend({ items }: { items: Array<[string, string]> }) {
  return (
    <ul class="legend">
      {items.map(([name, colour]) => (
        <li key={name}>
          <span class="swatch" style={{ background: colour }} />
          {name}
        </li>
      ))}
    </ul>
  );
}

/** The chart's numbers as a table (the list pages' ListTable), folded under "as a table". */
function AsTable({ head, rows, testId }: { head: string[]; rows: Array<Array<string | number>>; testId: string }) {
  return (
    <details class="as-table">
      <summary>as a table</summary>
      <ListTable
        items={rows}
        error={null}
        empty="no rows in the range"
        testId={testId}
        columns={head}
        row={(r) => (
          <tr key={r.join("|")}>
            {r.map((c, i) => (
              <td key={head[i]}>{c}</td>
            ))}
          </tr>
        )}
      />
    </details>
  );
}

const count = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;
const msText = (v: number | null) => (v === null ? "–" : `${v} ms`);

export function UsagePage() {
  const [days, setDays] = useState<string>("7");
  const [data, setData] = useState<Usage | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const ctl = new AbortController();
    const now = Date.now();
    setError(null);
    client
      .usage({ from: isoDay(now - (Number(days) - 1) * DAY_MS), to: isoDay(now) }, { signal: ctl.signal })
      .then((u) => ctl.signal.aborted || setData(u))
      .catch((err) => ctl.signal.aborted || setError((err as Error).message));
    return () => ctl.abort();
  }, [days]);

  return (
    <div class="usage">
      <h2>Usage</h2>
      <div class="toolbar">
        <label for="usage-range">Range (UTC)</label>
        <select id="usage-range" value={days} onChange={(e) => setDays((e.target as HTMLSelectElement).value)}>
          {RANGES.map(([v, l]) => (
            <option key={v} value={v}>
              {l}
            </option>
          ))}
        </select>
        {data && (
          <span class="muted" data-testid="usage-range">
            {data.from} to {data.to}
          </span>
        )}
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {!data && !error && <p class="muted">loading…</p>}
      {data && <Charts u={data} />}
    </div>
  );
}

function Charts({ u }: { u: Usage }) {
  // Jobs per hour: every hour of the range that has jobs, stacked by state.
  const states = [...new Set(u.jobs_per_hour.map((h) => h.state))];
  const hours = [...new Set(u.jobs_per_hour.map((h) => h.hour))];
  const hourStacks: Stack[] = hours.map((x) => ({
    x: `${x.slice(5, 13).replace("T", " ")}h`,
    parts: u.jobs_per_hour.filter((h) => h.hour === x).map((h) => ({ series: h.state, value: h.jobs })),
  }));
  // Spend per day, stacked by agent and model.
  const seriesOf = (s: Usage["spend"][number]) => `${s.agent ?? "default agent"} · ${s.model}`;
  const spendSeries = [...new Set(u.spend.map(seriesOf))];
  const spendColour = (s: string) => PALETTE[spendSeries.indexOf(s) % PALETTE.length] as string;
  const spendDays = [...new Set(u.spend.map((s) => s.day))];
  const spendStacks: Stack[] = spendDays.map((d) => ({
    x: d,
    parts: u.spend.filter((s) => s.day === d).map((s) => ({ series: seriesOf(s), value: s.cost_usd ?? 0 })),
  }));
  const overBudget =
    u.daily_budget_usd === null
      ? []
      : spendDays.filter(
          (d) =>
            u.spend.filter((s) => s.day === d).reduce((a, s) => a + (s.cost_usd ?? 0), 0) >=
            (u.daily_budget_usd as number),
        );
  const totalJobs = u.jobs_per_hour.reduce((a, h) => a + h.jobs, 0);
  const spent = u.spend.reduce((a, s) => a + (s.cost_usd ?? 0), 0);
  const lat = [
    ["dispatch", u.latency.dispatch_ms],
    ["first output", u.latency.first_output_ms],
    ["total", u.latency.total_ms],
  ] as const;
  const latMax = Math.max(...lat.flatMap(([, p]) => [p.p50 ?? 0, p.p95 ?? 0, p.p99 ?? 0]));

  return (
    <div class="charts">
      <section aria-labelledby="jobs-head" class="chart-box" data-testid="chart-jobs">
        <h3 id="jobs-head">Jobs per hour by state</h3>
        <p class="muted">
          {count(totalJobs, "job", "jobs")} created in the range
          {totalJobs ? `, in ${count(hours.length, "hour", "hours")} with jobs` : ""}.
        </p>
        {totalJobs > 0 && (
          <>
            <Columns
              label={`Jobs per hour by state: ${states.map((s) => `${u.jobs_per_hour.filter((h) => h.state === s).reduce((a, h) => a + h.jobs, 0)} ${s}`).join(", ")}`}
              stacks={hourStacks}
              colour={(s) => STATE_COLOURS[s] ?? "#575c66"}
              format={(v) => String(Math.round(v))}
            />
            <Legend items={states.map((s) => [s, STATE_COLOURS[s] ?? "#575c66"])} />
          </>
        )}
        <AsTable
          testId="table-jobs"
          head={["hour (UTC)", "state", "jobs"]}
          rows={u.jobs_per_hour.map((h) => [h.hour, h.state, h.jobs])}
        />
      </section>

      <section aria-labelledby="latency-head" class="chart-box" data-testid="chart-latency">
        <h3 id="latency-head">Latency percentiles</h3>
        <ul class="lat-rows">
          {lat.map(([name, p]) => (
            <li key={name} data-latency={name}>
              <span class="lat-name">
                {name} <span class="muted">({p.jobs} jobs)</span>
              </span>
              <Rows
                label={`${name} latency: p50 ${msText(p.p50)}, p95 ${msText(p.p95)}, p99 ${msText(p.p99)}`}
                rows={[
                  { name: "p50", value: p.p50, colour: PALETTE[0] },
                  { name: "p95", value: p.p95, colour: PALETTE[3] },
                  { name: "p99", value: p.p99, colour: PALETTE[2] },
                ]}
                format={(v) => `${v} ms`}
                max={latMax}
              />
              <span class="lat-values">
                p50 {msText(p.p50)} · p95 {msText(p.p95)} · p99 {msText(p.p99)}
              </span>
            </li>
          ))}
        </ul>
        <AsTable
          testId="table-latency"
          head={["latency", "jobs", "p50 ms", "p95 ms", "p99 ms"]}
          rows={lat.map(([n, p]) => [n, p.jobs, p.p50 ?? "–", p.p95 ?? "–", p.p99 ?? "–"])}
        />
      </section>

      <section aria-labelledby="spend-head" class="chart-box" data-testid="chart-spend">
        <h3 id="spend-head">Spend per day by agent and model</h3>
        <p class="muted" data-testid="spend-summary">
          {usd(spent)} in the range; daily budget {u.daily_budget_usd === null ? "none" : usd(u.daily_budget_usd)}
          {overBudget.length > 0 && <strong class="error">; reached on {overBudget.join(", ")}</strong>}
        </p>
        {spendStacks.length > 0 && (
          <>
            <Columns
              label={`Spend per day by agent and model, ${usd(spent)} in all${u.daily_budget_usd === null ? "" : `, against a daily budget of ${usd(u.daily_budget_usd)}`}`}
              stacks={spendStacks}
              colour={spendColour}
              line={
                u.daily_budget_usd === null
                  ? null
                  : { value: u.daily_budget_usd, label: `budget ${usd(u.daily_budget_usd)}` }
              }
              format={(v) => usd(v)}
            />
            <Legend items={spendSeries.map((s) => [s, spendColour(s)])} />
          </>
        )}
        <AsTable
          testId="table-spend"
          head={["day", "agent", "model", "model calls", "cost"]}
          rows={u.spend.map((s) => [s.day, s.agent ?? "default agent", s.model, s.model_calls, usd(s.cost_usd)])}
        />
      </section>

      <section aria-labelledby="errors-head" class="chart-box" data-testid="chart-errors">
        <h3 id="errors-head">Top error codes</h3>
        {u.errors.length === 0 ? (
          <p class="muted">no job of the range ended with an error</p>
        ) : (
          <ul class="lat-rows">
            {u.errors.map((e) => (
              <li key={e.code}>
                <span class="lat-name">
                  <code>{e.code}</code>
                </span>
                <Rows
                  label={`${e.code}: ${e.jobs} jobs`}
                  rows={[{ name: e.code, value: e.jobs, colour: PALETTE[2] }]}
                  format={(v) => `${v} jobs`}
                  max={u.errors[0]?.jobs ?? 1}
                />
                <span class="lat-values">{count(e.jobs, "job", "jobs")}</span>
              </li>
            ))}
          </ul>
        )}
        <AsTable testId="table-errors" head={["error code", "jobs"]} rows={u.errors.map((e) => [e.code, e.jobs])} />
      </section>
    </div>
  );
}

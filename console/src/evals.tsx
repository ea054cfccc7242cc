/**
 * Evals (docs/api.md "Evals"): the tenant's evals with their summaries (GET /v1/evals), one eval's
 * cases and scores (GET /v1/evals/{id}, read again every 2 s until every case is scored), and two
 * evals side by side, case by case (GET /v1/evals/{a}/compare/{b}). Two evals are picked for
 * comparing in the list. Evals are made through the API (POST /v1/evals); the console has no form
 * for one yet.
 */
import { useEffect, useState } from "preact/hooks";
import type { EvalAnswer, EvalCompare, EvalPage } from "../../src/client/client";
import { usd } from "./answer";
import { client } from "./api";
import { ms } from "./debug-panel";
import { Alert, JobLink, ListTable, useLoaded, usePaged, when } from "./list";

type Summary = EvalPage["evals"][number]["summary"];
type Case = EvalAnswer["eval"]["cases"][number];

const PAGE = 20;
/** How often an eval still being scored is read again. */
const POLL_MS = 2000;

const pct = (v: number | null) => (v === null ? "–" : `${Math.round(v * 1000) / 10}%`);
const score = (v: number | null) => (v === null ? "–" : v.toFixed(2));
const cut = (s: string | null, n = 80) => (s === null ? "–" : s.length > n ? `${s.slice(0, n - 1)}…` : s);
/** A case's input as a line: its last message. */
const inputLine = (c: Case) => cut(c.input.messages.at(-1)?.content ?? "");
const evalLink = (id: string) => (
  <a href={`#/evals/${id}`}>
    <code>{id.slice(0, 8)}</code>
  </a>
);

export function Evals() {
  const { page, error, pager } = usePaged<EvalPage["evals"][number]>(
    (cursor) => client.listEvals({ limit: PAGE, cursor }).then((p) => ({ items: p.evals, next_cursor: p.next_cursor })),
    [],
    { back: "Newer", forward: "Older" },
  );
  const [picked, setPicked] = useState<string[]>([]);
  const toggle = (id: string, on: boolean) =>
    setPicked((p) => (on ? [...p.filter((x) => x !== id), id].slice(-2) : p.filter((x) => x !== id)));
  const [a, b] = picked;
  return (
    <div class="evals">
      <h2>Evals</h2>
      <p class="muted">
        An eval runs an agent version over cases as jobs and scores each answer (made with <code>POST /v1/evals</code>
        ). Pick two to see them side by side.
      </p>
      <div class="toolbar">
        {a && b ? (
          <a class="button primary" href={`#/evals/${a}/compare/${b}`} data-testid="compare-link">
            Compare the two picked
          </a>
        ) : (
          <span class="muted" data-testid="compare-hint">
            {picked.length} of 2 picked to compare
          </span>
        )}
        {pager}
      </div>
      <ListTable
        items={page?.items}
        error={error}
        empty="no evals"
        testId="evals-table"
        columns={[
          "compare",
          "eval",
          "agent",
          "created",
          "cases",
          "scored",
          "pass rate",
          "mean score",
          "cost",
          "p50",
          "p95",
        ]}
        row={(e) => (
          <tr key={e.id} data-eval-id={e.id}>
            <td>
              <input
                type="checkbox"
                aria-label={`Pick eval ${e.id.slice(0, 8)} to compare`}
                checked={picked.includes(e.id)}
                onChange={(ev) => toggle(e.id, (ev.target as HTMLInputElement).checked)}
              />
            </td>
            <td>{evalLink(e.id)}</td>
            <td>
              <code>
                {e.agent_version.name}@{e.agent_version.version}
              </code>
            </td>
            <td>{when(e.created_at)}</td>
            <td>{e.cases_total}</td>
            <td>{e.summary.scored}</td>
            <td data-testid="pass-rate">{pct(e.summary.pass_rate)}</td>
            <td>{score(e.summary.mean_score)}</td>
            <td>{usd(e.summary.cost_usd)}</td>
            <td>{ms(e.summary.latency_p50_ms)}</td>
            <td>{ms(e.summary.latency_p95_ms)}</td>
          </tr>
        )}
      />
    </div>
  );
}

/** A summary as a definition list (the detail page) or as one column of the compare table. */
const SUMMARY_ROWS: Array<[string, (s: Summary) => string]> = [
  ["cases", (s) => String(s.cases_total)],
  ["finished", (s) => String(s.finished)],
  ["scored", (s) => String(s.scored)],
  ["passed", (s) => String(s.passed)],
  ["pass rate", (s) => pct(s.pass_rate)],
  ["mean score", (s) => score(s.mean_score)],
  ["cost", (s) => usd(s.cost_usd)],
  ["latency p50", (s) => ms(s.latency_p50_ms)],
  ["latency p95", (s) => ms(s.latency_p95_ms)],
];

/** Reads `load` again every POLL_MS while `more` holds for what it read. */
function usePolled<T>(load: () => Promise<T>, deps: unknown[], more: (d: T) => boolean) {
  const loaded = useLoaded(load, deps);
  const again = loaded.data !== null && more(loaded.data);
  useEffect(() => {
    if (!again) return;
    const t = setTimeout(loaded.refresh, POLL_MS);
    return () => clearTimeout(t);
  }, [loaded.data, again]);
  return loaded;
}

function Scores({ c }: { c: Case }) {
  if (!c.scores) return <span class="muted">not scored yet</span>;
  return (
    <ul class="scores">
      {c.scores.map((s) => (
        <li key={s.scorer} title={s.reason ?? undefined}>
          <code>{s.scorer}</code> {score(s.score)}
          {s.pass === false && " ✗"}
          {s.pass === true && " ✓"}
          {s.judge_job_id && (
            <>
              {" "}
              (judge <JobLink id={s.judge_job_id} />)
            </>
          )}
          {s.reason && <span class="muted"> — {cut(s.reason, 60)}</span>}
        </li>
      ))}
    </ul>
  );
}

export function EvalDetail({ id }: { id: string }) {
  const { data, error } = usePolled(
    () => client.getEval(id),
    [id],
    (d) => d.eval.summary.scored < d.eval.cases_total,
  );
  const e = data?.eval;
  return (
    <div class="eval">
      <h2>
        Eval <code>{id}</code>
      </h2>
      <Alert error={error} />
      {!e && !error && <p class="muted">loading…</p>}
      {e && (
        <>
          <p class="meta">
            agent{" "}
            <a href={`#/agents/${e.agent_version.name}/${e.agent_version.version}`}>
              <code>
                {e.agent_version.name}@{e.agent_version.version}
              </code>
            </a>{" "}
            · created {when(e.created_at)} · scorers {e.scorers.map((s) => String(s.name ?? s.type)).join(", ")}
            {e.summary.scored < e.cases_total && " · scoring…"}
          </p>
          <dl class="summary" data-testid="eval-summary">
            {SUMMARY_ROWS.map(([label, f]) => (
              <div key={label}>
                <dt>{label}</dt>
                <dd>{f(e.summary)}</dd>
              </div>
            ))}
          </dl>
          <ListTable
            items={e.cases}
            error={null}
            empty="no cases"
            testId="eval-cases"
            columns={["#", "input", "expect", "job", "state", "output", "scores", "pass", "cost", "latency"]}
            row={(c) => (
              <tr key={c.index} data-case={c.index}>
                <td>{c.index}</td>
                <td class="wrap">{inputLine(c)}</td>
                <td class="wrap">{cut(c.expect)}</td>
                <td>
                  <JobLink id={c.job_id} />
                </td>
                <td>{c.state ? <span class={`state state-${c.state}`}>{c.state}</span> : "purged"}</td>
                <td class="wrap" data-testid="case-output">
                  {cut(c.output)}
                </td>
                <td class="wrap">
                  <Scores c={c} />
                </td>
                <td data-testid="case-pass">{c.pass === null ? "–" : c.pass ? "pass" : "fail"}</td>
                <td>{usd(c.cost_usd)}</td>
                <td>{ms(c.latency_ms)}</td>
              </tr>
            )}
          />
        </>
      )}
    </div>
  );
}

export function EvalCompareView({ a, b }: { a: string; b: string }) {
  const { data, error } = usePolled(
    () => client.compareEvals(a, b),
    [a, b],
    (d) => d.a.summary.scored < d.a.cases_total || d.b.summary.scored < d.b.cases_total,
  );
  const name = (e: EvalCompare["a"]) => `${e.agent_version.name}@${e.agent_version.version}`;
  return (
    <div class="eval-compare">
      <h2>Two evals side by side</h2>
      <Alert error={error} />
      {!data && !error && <p class="muted">loading…</p>}
      {data && (
        <>
          <div class="scroll">
            <table class="list" data-testid="compare-summary">
              <caption class="muted">Summaries</caption>
              <thead>
                <tr>
                  <th scope="col">measure</th>
                  <th scope="col">
                    A: {evalLink(data.a.id)} <code>{name(data.a)}</code>
                  </th>
                  <th scope="col">
                    B: {evalLink(data.b.id)} <code>{name(data.b)}</code>
                  </th>
                </tr>
              </thead>
              <tbody>
                {SUMMARY_ROWS.map(([label, f]) => (
                  <tr key={label} data-measure={label}>
                    <th scope="row">{label}</th>
                    <td>{f(data.a.summary)}</td>
                    <td>{f(data.b.summary)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <ListTable
            items={data.pairs}
            error={null}
            empty="no cases"
            testId="compare-pairs"
            columns={["#", "input", "A output", "A score", "B output", "B score", "B − A"]}
            row={(p) => (
              <tr key={p.index} data-case={p.index}>
                <td>{p.index}</td>
                <td class="wrap">
                  {p.a ? inputLine(p.a) : p.b ? inputLine(p.b) : "–"}
                  {p.a && p.b && !p.same_case && <span class="muted"> (the cases differ)</span>}
                </td>
                <td class="wrap">
                  {p.a && <JobLink id={p.a.job_id} />} <span data-testid="a-output">{p.a ? cut(p.a.output) : "–"}</span>
                </td>
                <td data-testid="a-score">{p.a ? score(p.a.score) : "–"}</td>
                <td class="wrap">
                  {p.b && <JobLink id={p.b.job_id} />} <span data-testid="b-output">{p.b ? cut(p.b.output) : "–"}</span>
                </td>
                <td data-testid="b-score">{p.b ? score(p.b.score) : "–"}</td>
                <td data-testid="score-delta">
                  {p.score_delta === null ? "–" : `${p.score_delta > 0 ? "+" : ""}${p.score_delta.toFixed(2)}`}
                </td>
              </tr>
            )}
          />
        </>
      )}
    </div>
  );
}

/** The tenant's jobs, newest first, with a state filter and cursor paging (GET /v1/jobs). */
import { useState } from "preact/hooks";
import { JOB_STATES, type JobState } from "../../src/contracts/job-state";
import { usd } from "./answer";
import { client, type JobView } from "./api";
import { ms } from "./debug-panel";
import { day, JobLink, ListTable, usePaged, when } from "./list";

const PAGE = 20;
/** The jobs table's word for what a waiting job waits for, by wait kind. */
const WAIT_VERB = { approval: "approve", input: "answer", children: "children of", budget: "budget for" } as const;

export function Jobs() {
  const [state, setState] = useState<JobState | "">("");
  const { page, error, pager } = usePaged<JobView>(
    (cursor) =>
      client
        .list({ state: state || undefined, limit: PAGE, cursor })
        .then((p) => ({ items: p.jobs, next_cursor: p.next_cursor })),
    [state],
    { back: "Newer", forward: "Older" },
  );

  return (
    <div class="jobs">
      <h2>Jobs</h2>
      <div class="toolbar">
        <label>
          State{" "}
          <select
            data-testid="state-filter"
            value={state}
            onChange={(e) => setState((e.target as HTMLSelectElement).value as JobState | "")}
          >
            <option value="">all</option>
            {JOB_STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        {pager}
      </div>
      <ListTable
        items={page?.items}
        error={error}
        empty="no jobs"
        testId="jobs-table"
        columns={["job", "state", "conversation", "created", "total", "cost"]}
        row={(j) => (
          <tr key={j.id} data-job-id={j.id}>
            <td>
              <JobLink id={j.id} />
            </td>
            <td>
              <span class={`state state-${j.state}`}>{j.state}</span>
              {j.waiting_for && (
                <span class="muted" data-testid="waiting-for">
                  {" "}
                  {WAIT_VERB[j.waiting_for.kind]} <code>{j.waiting_for.tool}</code>
                </span>
              )}
              {j.state === "queued" && j.run_at && Date.parse(j.run_at) > Date.now() && (
                <span class="muted" data-testid="run-at">
                  {" "}
                  from <time dateTime={j.run_at}>{day(j.run_at)}</time>
                </span>
              )}
              {j.priority !== 0 && (
                <span class="muted" data-testid="priority">
                  {" "}
                  priority {j.priority}
                </span>
              )}
            </td>
            <td>{j.conversation_id ? <a href={`#/chat/${j.conversation_id}`}>{j.conversation_id}</a> : "–"}</td>
            <td>{when(j.created_at)}</td>
            <td>{ms(j.latency.total_latency_ms)}</td>
            <td data-testid="job-cost" data-usd={j.usage.cost_usd ?? ""}>
              {j.usage.model_calls > 0 ? usd(j.usage.cost_usd) : "–"}
            </td>
          </tr>
        )}
      />
    </div>
  );
}

/** The tenant's jobs, newest first, with a state filter and cursor paging (GET /v1/jobs). */
import { useState } from "preact/hooks";
import { JOB_STATES, type JobState } from "../../src/contracts/job-state";
import { client, type JobView } from "./api";
import { ms } from "./debug-panel";
import { day, usePaged } from "./list";

const PAGE = 20;
/** The jobs table's word for what a waiting job waits for, by wait kind. */
const WAIT_VERB = { approval: "approve", input: "answer", children: "children of" } as const;

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
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {!page && !error && <p class="muted">loading…</p>}
      {page && page.items.length === 0 && <p class="muted">no jobs</p>}
      {page && page.items.length > 0 && (
        <div class="scroll">
          <table class="list" data-testid="jobs-table">
            <thead>
              <tr>
                <th scope="col">job</th>
                <th scope="col">state</th>
                <th scope="col">conversation</th>
                <th scope="col">created</th>
                <th scope="col">total</th>
              </tr>
            </thead>
            <tbody>
              {page.items.map((j) => (
                <tr key={j.id} data-job-id={j.id}>
                  <td>
                    <a href={`#/jobs/${j.id}`}>
                      <code>{j.id.slice(0, 8)}</code>
                    </a>
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
                  <td>
                    <time dateTime={j.created_at}>{day(j.created_at)}</time>
                  </td>
                  <td>{ms(j.latency.total_latency_ms)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

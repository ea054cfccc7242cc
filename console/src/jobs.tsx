/** The tenant's jobs, newest first, with a state filter and cursor paging (GET /v1/jobs). */
import { useEffect, useState } from "preact/hooks";
import { JOB_STATES, type JobState } from "../../src/contracts/job-state";
import { client, type JobView } from "./api";
import { ms } from "./debug-panel";

const PAGE = 20;
/** The jobs table's word for what a waiting job waits for, by wait kind. */
const WAIT_VERB = { approval: "approve", input: "answer", children: "children of" } as const;

export function Jobs() {
  const [state, setState] = useState<JobState | "">("");
  // The cursors of the pages before this one, so "Newer" can go back; null is the first page.
  const [cursors, setCursors] = useState<Array<string | null>>([null]);
  const [page, setPage] = useState<{ jobs: JobView[]; next_cursor: string | null } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const cursor = cursors.at(-1) ?? null;

  useEffect(() => {
    let live = true;
    setPage(null);
    setError(null);
    client
      .list({ state: state || undefined, limit: PAGE, cursor: cursor ?? undefined })
      .then((p) => live && setPage(p))
      .catch((err) => live && setError((err as Error).message));
    return () => {
      live = false;
    };
  }, [state, cursor]);

  return (
    <div class="jobs">
      <h2>Jobs</h2>
      <div class="toolbar">
        <label>
          State{" "}
          <select
            data-testid="state-filter"
            value={state}
            onChange={(e) => {
              setState((e.target as HTMLSelectElement).value as JobState | "");
              setCursors([null]);
            }}
          >
            <option value="">all</option>
            {JOB_STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <button type="button" disabled={cursors.length < 2} onClick={() => setCursors(cursors.slice(0, -1))}>
          Newer
        </button>
        <button
          type="button"
          disabled={!page?.next_cursor}
          onClick={() => page?.next_cursor && setCursors([...cursors, page.next_cursor])}
        >
          Older
        </button>
        <span class="muted">page {cursors.length}</span>
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {!page && !error && <p class="muted">loading…</p>}
      {page && page.jobs.length === 0 && <p class="muted">no jobs</p>}
      {page && page.jobs.length > 0 && (
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
              {page.jobs.map((j) => (
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
                  </td>
                  <td>{j.conversation_id ? <a href={`#/chat/${j.conversation_id}`}>{j.conversation_id}</a> : "–"}</td>
                  <td>
                    <time dateTime={j.created_at}>{j.created_at.replace("T", " ").slice(0, 19)}</time>
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

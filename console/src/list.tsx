/**
 * What the console's pages share: reading a list or a page's data (once, paged, again after an
 * action), the error and empty states and the table they show it in, and how a timestamp is shown.
 */
import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";

/** An API timestamp as a list shows it: `YYYY-MM-DD hh:mm:ss` (UTC, as the API gives it). */
export const day = (iso: string) => iso.replace("T", " ").slice(0, 19);

/** A timestamp cell's content: the time (machine-readable too), or a dash for none. */
export const when = (iso: string | null | undefined) => (iso ? <time dateTime={iso}>{day(iso)}</time> : "–");

/** A job by its short id, linking to its inspector. */
export function JobLink({ id }: { id: string }) {
  return (
    <a href={`#/jobs/${id}`}>
      <code>{id.slice(0, 8)}</code>
    </a>
  );
}

/** What a page shows of a failed call: the API's error as the client words it (`400 invalid_request: …`). */
export const errorText = (err: unknown) => (err as Error).message;

/** A page's or a form's error, for screen readers too; nothing when there is none. */
export function Alert({ error }: { error: string | null }) {
  return error ? (
    <p class="error" role="alert">
      {error}
    </p>
  ) : null;
}

/**
 * A page's data, read again when `deps` change and after `refresh()`; null until the first read
 * answers (a later read keeps the shown data until it answers). `act` runs an action (delete,
 * disable, retry): it clears the error, then reads again, or shows why the action failed.
 */
export function useLoaded<T>(load: () => Promise<T>, deps: unknown[]) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [reads, setReads] = useState(0);
  useEffect(() => {
    let live = true;
    load()
      .then((d) => live && setData(d))
      .catch((err) => live && setError(errorText(err)));
    return () => {
      live = false;
    };
  }, [...deps, reads]);
  const refresh = () => setReads((n) => n + 1);
  const act = async (work: Promise<unknown>) => {
    setError(null);
    try {
      await work;
      refresh();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return { data, error, refresh, act };
}

/**
 * A list as every page shows it: the error, "loading…" until the first answer, `empty` for no
 * rows, else a table (`testId`) with a header cell a column and `row` for each item (keyed there).
 */
export function ListTable<T>({
  items,
  error,
  empty,
  testId,
  columns,
  row,
}: {
  items: T[] | null | undefined;
  error: string | null;
  empty: string;
  testId: string;
  columns: string[];
  row: (item: T) => ComponentChildren;
}) {
  return (
    <>
      <Alert error={error} />
      {!items && !error && <p class="muted">loading…</p>}
      {items && items.length === 0 && <p class="muted">{empty}</p>}
      {items && items.length > 0 && (
        <div class="scroll">
          <table class="list" data-testid={testId}>
            <thead>
              <tr>
                {columns.map((c) => (
                  <th key={c} scope="col">
                    {c}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>{items.map(row)}</tbody>
          </table>
        </div>
      )}
    </>
  );
}

/**
 * Cursor paging for the console's lists (GET /v1/jobs, /v1/agents, an agent's versions): the
 * cursors of the pages so far, null for the first, so the back button needs no API support.
 * A change of `deps` (a filter, another agent) starts again at the first page.
 */
export function usePaged<T>(
  load: (cursor: string | undefined) => Promise<{ items: T[]; next_cursor: string | null }>,
  deps: unknown[],
  labels: { back: string; forward: string } = { back: "Previous", forward: "Next" },
) {
  // The cursors belong to the deps they were read under: new deps read as the first page at
  // once, in the same render, rather than fetching the old cursor under them and then resetting.
  const key = JSON.stringify(deps);
  const [paging, setPaging] = useState<{ key: string; cursors: Array<string | null> }>({ key, cursors: [null] });
  const cursors = paging.key === key ? paging.cursors : [null];
  const setCursors = (next: Array<string | null>) => setPaging({ key, cursors: next });
  const [page, setPage] = useState<{ items: T[]; next_cursor: string | null } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const cursor = cursors.at(-1) ?? null;
  useEffect(() => {
    let live = true;
    setPage(null);
    setError(null);
    load(cursor ?? undefined)
      .then((p) => live && setPage(p))
      .catch((err) => live && setError(errorText(err)));
    return () => {
      live = false;
    };
  }, [cursor, key]);
  const pager = (
    <>
      <button type="button" disabled={cursors.length < 2} onClick={() => setCursors(cursors.slice(0, -1))}>
        {labels.back}
      </button>
      <button
        type="button"
        disabled={!page?.next_cursor}
        onClick={() => page?.next_cursor && setCursors([...cursors, page.next_cursor])}
      >
        {labels.forward}
      </button>
      <span class="muted">page {cursors.length}</span>
    </>
  );
  return { page, error, pager };
}

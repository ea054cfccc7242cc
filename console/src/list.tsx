/** What the console's list pages share: cursor paging and how a timestamp is shown. */
import { useEffect, useState } from "preact/hooks";

/** An API timestamp as a list shows it: `YYYY-MM-DD hh:mm:ss` (UTC, as the API gives it). */
export const day = (iso: string) => iso.replace("T", " ").slice(0, 19);

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
      .catch((err) => live && setError((err as Error).message));
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

/**
 * The job event stream's reconnect contract (docs/api.md, "Event stream"), shared by the gateway
 * that sends it and the client that follows it.
 */

/**
 * The `retry:` every stream opens with: how long a client waits before reconnecting after the
 * stream drops. Ours rather than the browser's default (3 s in Chromium and Firefox): a dropped
 * stream of a running job should resume within a second, and one reconnect a second is cheap
 * (an authenticated request and one Durable Object read).
 */
export const SSE_RETRY_MS = 1_000;

/**
 * A finished job's stream with nothing after the cursor answers this status, with no body: the
 * one answer that makes a browser's EventSource stop reconnecting (any other non-200 is an
 * error it reports; a 200 that closes is reconnected to).
 */
export const SSE_FINISHED_STATUS = 204;

/**
 * The composite cursor of a tree stream (`?include=descendants`): `t1.` + base64url (no padding)
 * of `{job id: offset}` for every job of the tree seen so far. The gateway writes one into every
 * frame's `id`; the client reads it back to drop a frame it already delivered (the frame's own
 * job's offset). Runtime-neutral: btoa/atob only.
 */
export const TREE_CURSOR_PREFIX = "t1.";
export type TreeCursor = Record<string, number>;
/** A job id as cursors hold it (lower-case, as Postgres writes uuids). */
const CURSOR_JOB_RE = /^[0-9a-f-]{36}$/;

export function encodeTreeCursor(c: TreeCursor): string {
  const b64 = btoa(JSON.stringify(c));
  return TREE_CURSOR_PREFIX + b64.replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/** The offsets a tree cursor holds, or null when `raw` is not one. */
export function decodeTreeCursor(raw: string): TreeCursor | null {
  if (!raw.startsWith(TREE_CURSOR_PREFIX)) return null;
  let parsed: unknown;
  try {
    const b64 = raw.slice(TREE_CURSOR_PREFIX.length).replaceAll("-", "+").replaceAll("_", "/");
    parsed = JSON.parse(atob(b64));
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return null;
  const out: TreeCursor = {};
  for (const [k, v] of Object.entries(parsed)) {
    if (!isCursorJobId(k) || !Number.isSafeInteger(v) || (v as number) < 0) return null;
    out[k] = v as number;
  }
  return out;
}

export const isCursorJobId = (id: string): boolean => CURSOR_JOB_RE.test(id);

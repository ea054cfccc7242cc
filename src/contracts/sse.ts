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

/**
 * The gateway's per-tenant abuse limits and their defaults (workers/gateway-config.ts reads the overrides;
 * README "Environment" and docs/limits.md document them). 0 turns a limit off.
 *
 * The defaults sit above what this repository's own tools need against `npm run dev`: the load
 * tool's 100 concurrent users on one key make 3 requests per run (submit, stream, read back), so
 * ~300 requests within the few seconds of a step, well inside 1,200 per 10 s, and hold at most
 * 100 streams; bench:cancel and bench:events hold 100 streams each (under 200); nothing queues
 * more than 100 jobs (under 1,000). And they are far below what one key could otherwise take.
 */
export const LIMIT_DEFAULTS = {
  /** Requests per API key per window (sliding window, every /v1 route). */
  rateLimitRequests: 1200,
  rateLimitWindowS: 10,
  /** Open SSE streams plus chat WebSockets per tenant, counted across all jobs and conversations. */
  maxStreamsPerTenant: 200,
  /** Jobs of one tenant in `queued` at once; a submit past it is refused. */
  maxQueuedJobsPerTenant: 1000,
} as const;

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
  /**
   * Agents one tenant may create, archived ones included (nothing is deleted). Ten times what
   * any example or test here defines; agents are definitions, not runs.
   */
  maxAgentsPerTenant: 100,
  /** Versions one agent may have, version 1 included: a long edit history, not a write loop. */
  maxVersionsPerAgent: 100,
  /**
   * Bytes of stored definitions (each version's jsonb text) per tenant, all agents and versions:
   * 8 MiB, some 4,000 versions of a typical 2 KB definition, 128 of the largest one may be (64 KiB).
   */
  maxAgentBytesPerTenant: 8 * 1024 * 1024,
} as const;

/**
 * Per-isolate memory of the jobs this isolate just created: job id → tenant id, for
 * OWNER_TTL_MS after the submit began. GET /v1/jobs/:id/events asks it before Postgres: the
 * stream opened right after a submit (every client of the load tool, the SDK's `run`) then costs
 * no statement for its tenant check.
 *
 * Why a hit needs nothing else from the row: a job's tenant never changes, and the route's other
 * question (did the job finish longer ago than the event retention, or was it purged?) has one
 * answer for a job created less than OWNER_TTL_MS ago: no. Both retentions are at least 60 s
 * (JOB_EVENTS_RETENTION_S and JOB_RETENTION_S, gateway-config.ts), counted from the finish,
 * which is after the creation, which is after the moment remembered here. Only jobs the submit
 * created are remembered, never an idempotent replay (that job may be old).
 *
 * A miss (another isolate took the submit, the entry expired, the map was full) reads Postgres as
 * before; the map holds at most MAX_ENTRIES ids, the oldest dropped first.
 */
export const OWNER_TTL_MS = 30_000;
const MAX_ENTRIES = 10_000;

const owners = new Map<string, { tenantId: string; since: number }>();

/** `since`: a time no later than the job's creation (the submit's start). */
export function rememberJobOwner(jobId: string, tenantId: string, since: number): void {
  if (owners.size >= MAX_ENTRIES) {
    const oldest = owners.keys().next().value;
    if (oldest !== undefined) owners.delete(oldest);
  }
  owners.set(jobId, { tenantId, since });
}

/** true when this isolate created `jobId` for `tenantId` less than OWNER_TTL_MS ago. */
export function knownJobOwner(jobId: string, tenantId: string, now = Date.now()): boolean {
  const hit = owners.get(jobId);
  if (!hit) return false;
  if (now - hit.since >= OWNER_TTL_MS) {
    owners.delete(jobId);
    return false;
  }
  return hit.tenantId === tenantId;
}

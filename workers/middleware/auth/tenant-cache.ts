/**
 * A tiny per-isolate cache of key hash → tenant id, so a busy client does not cost one Postgres
 * round trip per request. Only hits are cached, for TTL_MS counted from the moment the lookup
 * that found the key *started*: a key revoked in Postgres is refused by every isolate at most
 * TTL_MS after the revocation committed (a lookup that itself takes longer than TTL_MS stretches
 * that to its own duration, and no further). An unknown key always asks Postgres.
 *
 * Concurrent requests with the same key share one lookup: a burst of 100 submits from a client
 * whose entry had expired used to send 100 identical lookups through the Neon driver ahead of
 * its 100 inserts, doubling the burst's database round trips (measured in docs/limits.md,
 * "Submit burst"). Sharing is safe for the bound above: a request that joins a lookup gets a
 * result no older than that lookup's start, and the entry expires by the same start.
 *
 * A request that joins another's lookup waits at most JOIN_WAIT_MS for it, then asks again: the
 * runtime may cancel a request's outbound I/O when that request's client goes away, and a lookup
 * left pending by it must not hold up requests that are still wanted. The new lookup is shared in
 * turn (requests arriving after it join it, not the old one), and a request whose wait ends after
 * another's already replaced the lookup joins that one: so however slow the database, a key has
 * about one lookup per JOIN_WAIT_MS in flight, not one per request. Before, each request whose
 * wait ended asked alone: 1,000 submits at once on `npm run dev` made ~2 Postgres calls each
 * (the lookup and the insert; Server-Timing `pg` desc p50 2), doubling the load on the very path
 * that was slow. A lookup that fails
 * fails every request that joined it (the dependency is down for all of them alike). A joining
 * request waits on a promise it made itself, which the lookup's request settles: workerd cancels
 * a request that awaits a promise another request made once that one has ended (and answers it
 * 500 "your Worker's code had hung"; seen on stream opens, stream-leases.ts).
 */
import { settlesWithin } from "../../../src/domain/async";

export const TTL_MS = 5_000;
const MAX_ENTRIES = 1_000;
/** Far above a healthy lookup (a few ms on Neon), far below a client's patience. */
export const JOIN_WAIT_MS = 2_000;

const entries = new Map<string, { tenantId: string; expiresAt: number }>();
/** A lookup in flight: the requests that joined it, each with its own promise's settlers. */
interface Lookup {
  joined: Set<{ resolve: (tenantId: string | null) => void; reject: (err: unknown) => void }>;
}
const inFlight = new Map<string, Lookup>();

export function cachedTenant(keyHash: string, now = Date.now()): string | null {
  const hit = entries.get(keyHash);
  if (!hit) return null;
  if (hit.expiresAt <= now) {
    entries.delete(keyHash);
    return null;
  }
  return hit.tenantId;
}

/** `startedAt`: when the lookup that found the key began (the TTL counts from it). */
export function rememberTenant(keyHash: string, tenantId: string, startedAt = Date.now()): void {
  if (entries.size >= MAX_ENTRIES && !entries.has(keyHash)) {
    // Map iterates in insertion order: drop the oldest entry.
    const oldest = entries.keys().next().value;
    if (oldest !== undefined) entries.delete(oldest);
  }
  entries.set(keyHash, { tenantId, expiresAt: startedAt + TTL_MS });
}

export interface ResolveOptions {
  now?: () => number;
  /** Keeps a shared lookup alive past the request that started it (the route's waitUntil). */
  keepAlive?: (work: Promise<unknown>) => void;
  joinWaitMs?: number;
}

/**
 * The tenant of `keyHash`, or null for an unknown or revoked key: from the cache, from a lookup
 * already in flight for the same key, or from `lookup` (Postgres).
 */
export async function resolveTenant(
  keyHash: string,
  lookup: () => Promise<string | null>,
  opts: ResolveOptions = {},
): Promise<string | null> {
  const now = opts.now ?? Date.now;
  const hit = cachedTenant(keyHash, now());
  if (hit !== null) return hit;
  for (let shared = inFlight.get(keyHash); shared; ) {
    const waitMs = opts.joinWaitMs ?? JOIN_WAIT_MS;
    let me!: { resolve: (tenantId: string | null) => void; reject: (err: unknown) => void };
    const mine = new Promise<string | null>((resolve, reject) => {
      me = { resolve, reject };
    });
    shared.joined.add(me);
    let answered: boolean;
    try {
      answered = await settlesWithin(mine, waitMs);
    } finally {
      shared.joined.delete(me);
    }
    if (answered) return mine;
    const newer = inFlight.get(keyHash);
    // Another request whose wait ended first has asked again: join its lookup instead.
    if (newer && newer !== shared) {
      shared = newer;
      continue;
    }
    break;
  }
  return sharedLookup(keyHash, lookup, now, opts);
}

/** A lookup other requests may join (it replaces a slower one in flight for the same key). */
function sharedLookup(
  keyHash: string,
  lookup: () => Promise<string | null>,
  now: () => number,
  opts: ResolveOptions,
): Promise<string | null> {
  const entry: Lookup = { joined: new Set() };
  inFlight.set(keyHash, entry);
  const own = lookupAndRemember(keyHash, lookup, now);
  const settle = (outcome: { tenantId: string | null } | { err: unknown }) => {
    if (inFlight.get(keyHash) === entry) inFlight.delete(keyHash);
    for (const j of entry.joined) "err" in outcome ? j.reject(outcome.err) : j.resolve(outcome.tenantId);
  };
  const settled = own.then(
    (tenantId) => settle({ tenantId }),
    (err: unknown) => settle({ err }),
  );
  opts.keepAlive?.(settled);
  return own;
}

async function lookupAndRemember(
  keyHash: string,
  lookup: () => Promise<string | null>,
  now: () => number,
): Promise<string | null> {
  const startedAt = now();
  const tenantId = await lookup();
  if (tenantId !== null) rememberTenant(keyHash, tenantId, startedAt);
  return tenantId;
}

/** For tests: forget every entry and lookup. */
export function clearTenantCache(): void {
  entries.clear();
  inFlight.clear();
}

/**
 * A tiny per-isolate cache of key hash → tenant id, so a busy client does not cost one Postgres
 * round trip per request. Only hits are cached, for 5 s: a revoked key keeps working for at most
 * that long in an isolate that has just seen it; an unknown key always asks Postgres.
 */
const TTL_MS = 5_000;
const MAX_ENTRIES = 1_000;

const entries = new Map<string, { tenantId: string; expiresAt: number }>();

export function cachedTenant(keyHash: string, now = Date.now()): string | null {
  const hit = entries.get(keyHash);
  if (!hit) return null;
  if (hit.expiresAt <= now) {
    entries.delete(keyHash);
    return null;
  }
  return hit.tenantId;
}

export function rememberTenant(keyHash: string, tenantId: string, now = Date.now()): void {
  if (entries.size >= MAX_ENTRIES) {
    // Map iterates in insertion order: drop the oldest entry.
    const oldest = entries.keys().next().value;
    if (oldest !== undefined) entries.delete(oldest);
  }
  entries.set(keyHash, { tenantId, expiresAt: now + TTL_MS });
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Job and execution ids are UUIDs; anything else names nothing (and would fail Postgres' cast). */
export function isUuid(id: string): boolean {
  return UUID_RE.test(id);
}

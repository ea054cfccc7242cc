/**
 * Neon's pooled endpoints carry `-pooler` at the end of the first label of the host name
 * (ep-name-123456-pooler.region.aws.neon.tech). Their PgBouncer runs in transaction mode: each
 * transaction may land on another server connection, so session state (LISTEN, session advisory
 * locks, SET) does not survive between statements. Plain statements and transactions are fine.
 */
export function isPoolerUrl(databaseUrl: string): boolean {
  try {
    return new URL(databaseUrl).hostname.includes("-pooler.");
  } catch {
    return false;
  }
}

/**
 * Apply the committed drizzle migrations (`npm run db:migrate`, to DATABASE_DIRECT_URL when set,
 * else DATABASE_URL). Also exported for the dev stack and the tests, which migrate their
 * throwaway databases the same way.
 *
 * Two guards drizzle's migrator lacks:
 * - A session advisory lock around the whole run. Without it two migrators started together
 *   (two hosts' init containers, two CI jobs on one database) both read "nothing applied" and
 *   both run the DDL; one fails half-way on "relation already exists". With it the second waits
 *   and then finds everything applied. The wait is bounded by `lock_timeout`, which also bounds
 *   each DDL statement's wait for its table lock: an ALTER queued behind a long transaction
 *   would otherwise stall every query on that table behind it.
 * - An order check. drizzle applies only files whose journal `when` is newer than the last
 *   applied one, so a migration generated on a branch before the last one applied here (merged
 *   late) is skipped without a word and its schema change never happens. Here it fails loudly.
 *
 * Session state (the lock, SET) needs one server connection for the whole run: a transaction
 * pooler (Neon's `-pooler.` endpoints) does not give that, so a pooler URL is refused.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { readMigrationFiles } from "drizzle-orm/migrator";
import { drizzle } from "drizzle-orm/node-postgres";
import { migrate } from "drizzle-orm/node-postgres/migrator";
import pg from "pg";
import { isPoolerUrl } from "../../src/db/pooler-url";

export const MIGRATIONS_DIR = fileURLToPath(new URL("../../drizzle", import.meta.url));

/** The advisory lock key every migrator of this project takes: any fixed int8 will do; this is "ear-migr" in ASCII. */
export const MIGRATE_LOCK_KEY = 0x6561722d6d696772n.toString();

/**
 * How long a migrator waits for another one (and a DDL statement for its table lock). The
 * project's migrations apply in ~100 ms on an empty database; a minute covers a slow one
 * running elsewhere without letting a stuck one hang a deploy forever.
 */
export const DEFAULT_MIGRATE_LOCK_TIMEOUT_MS = 60_000;

const LOCK_NOT_AVAILABLE = "55P03";

export async function applyMigrations(
  databaseUrl: string,
  opts: { migrationsFolder?: string; lockTimeoutMs?: number } = {},
): Promise<void> {
  if (isPoolerUrl(databaseUrl)) {
    throw new Error(
      "migrations need a direct connection: this is a pooler URL (host contains -pooler.), where the migration lock and lock_timeout would not hold. Set DATABASE_DIRECT_URL to the unpooled endpoint.",
    );
  }
  const folder = opts.migrationsFolder ?? MIGRATIONS_DIR;
  const lockTimeoutMs = opts.lockTimeoutMs ?? DEFAULT_MIGRATE_LOCK_TIMEOUT_MS;
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query(`SET lock_timeout = ${Math.max(1, Math.floor(lockTimeoutMs))}`);
    try {
      await client.query("select pg_advisory_lock($1)", [MIGRATE_LOCK_KEY]);
    } catch (err) {
      if ((err as { code?: string }).code === LOCK_NOT_AVAILABLE) {
        throw new Error(
          `another migration holds the migration lock (pg_advisory_lock(${MIGRATE_LOCK_KEY})) and did not finish within ${lockTimeoutMs} ms; see pg_locks for its pid, or raise MIGRATE_LOCK_TIMEOUT_MS`,
        );
      }
      throw err;
    }
    try {
      await checkMigrationOrder(client, folder);
      await migrate(drizzle(client), { migrationsFolder: folder });
    } finally {
      await client.query("select pg_advisory_unlock($1)", [MIGRATE_LOCK_KEY]).catch(() => {});
    }
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * Every local migration dated at or before the last applied one must be applied (same content
 * hash). Throws, naming each file that is not, before drizzle gets to skip it.
 */
async function checkMigrationOrder(client: pg.Client, folder: string): Promise<void> {
  const { rows: exists } = await client.query<{ ok: boolean }>(
    "select to_regclass('drizzle.__drizzle_migrations') is not null as ok",
  );
  if (!exists[0]?.ok) return;
  const { rows } = await client.query<{ hash: string; created_at: string }>(
    "select hash, created_at::text from drizzle.__drizzle_migrations",
  );
  if (rows.length === 0) return;
  const applied = new Set(rows.map((r) => r.hash));
  const appliedAt = new Set(rows.map((r) => Number(r.created_at)));
  const last = Math.max(...appliedAt);
  // readMigrationFiles walks the journal's entries in order; the tags name the files.
  const journal = JSON.parse(await readFile(join(folder, "meta/_journal.json"), "utf8")) as {
    entries: Array<{ tag: string; when: number }>;
  };
  const local = readMigrationFiles({ migrationsFolder: folder });
  const problems: string[] = [];
  local.forEach((m, i) => {
    if (m.folderMillis > last || applied.has(m.hash)) return;
    const tag = journal.entries[i]?.tag ?? `#${i}`;
    problems.push(
      appliedAt.has(m.folderMillis)
        ? `${tag}.sql was applied here but its content has changed since: an applied migration must not be edited; put the change in a new migration`
        : `${tag}.sql (journal when ${m.folderMillis}, ${new Date(m.folderMillis).toISOString()}) is older than the last applied migration (${last}, ${new Date(last).toISOString()}) and was never applied here: drizzle would skip it silently. Regenerate it after the newer ones (drizzle-kit generate on the rebased branch) or move its "when" in meta/_journal.json past ${last}`,
    );
  });
  if (problems.length > 0) throw new Error(`migrations out of order:\n  ${problems.join("\n  ")}`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const url = process.env.DATABASE_DIRECT_URL || process.env.DATABASE_URL;
  if (!url) {
    console.error(
      "DATABASE_URL is not set. Example: DATABASE_URL=postgres://user:pass@127.0.0.1:5432/db npm run db:migrate",
    );
    process.exit(2);
  }
  const timeout = process.env.MIGRATE_LOCK_TIMEOUT_MS;
  const lockTimeoutMs = timeout ? Number(timeout) : undefined;
  if (lockTimeoutMs !== undefined && !(Number.isInteger(lockTimeoutMs) && lockTimeoutMs > 0)) {
    console.error(`MIGRATE_LOCK_TIMEOUT_MS must be a positive integer (milliseconds), got ${JSON.stringify(timeout)}`);
    process.exit(2);
  }
  const started = Date.now();
  applyMigrations(url, { lockTimeoutMs }).then(
    () => console.log(`migrations applied in ${Date.now() - started} ms`),
    (err) => {
      console.error(`migration failed: ${err instanceof Error ? err.message : String(err)}`);
      process.exit(1);
    },
  );
}

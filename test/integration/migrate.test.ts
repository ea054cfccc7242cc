/**
 * tools/stack/migrate.ts against a real Postgres: two migrators started at the same moment (two hosts'
 * init containers, two CI jobs) serialize on an advisory lock and apply the schema once; a waiter
 * gives up after its lock timeout with a message saying who holds the lock; and a migration file
 * dated before the last applied one, which drizzle's migrator skips without a word, fails loudly.
 */
import { execFile } from "node:child_process";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { applyMigrations, MIGRATE_LOCK_KEY, MIGRATIONS_DIR } from "../../tools/stack/migrate";
import { type PostgresService, startPostgres } from "../../tools/stack/services/postgres";

const run = promisify(execFile);

let postgres: PostgresService;
let admin: pg.Client;
let n = 0;
const tmpDirs: string[] = [];

beforeAll(async () => {
  postgres = await startPostgres();
  admin = new pg.Client({ connectionString: postgres.url });
  admin.on("error", () => {});
  await admin.connect();
});

afterAll(async () => {
  await admin?.end().catch(() => {});
  await postgres?.stop();
  for (const d of tmpDirs) await rm(d, { recursive: true, force: true });
});

async function emptyDb(): Promise<string> {
  const name = `migrate_${process.pid}_${++n}`;
  await admin.query(`CREATE DATABASE ${name}`);
  return postgres.url.replace(/\/postgres$/, `/${name}`);
}

async function journalEntries(dir = MIGRATIONS_DIR): Promise<Array<{ idx: number; when: number; tag: string }>> {
  return JSON.parse(await readFile(join(dir, "meta/_journal.json"), "utf8")).entries;
}

async function waitUntil(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}

function migrateProcess(url: string): Promise<{ code: number; out: string }> {
  return run(process.execPath, ["--import", "tsx", "tools/stack/migrate.ts"], {
    env: { ...process.env, DATABASE_URL: url, DATABASE_DIRECT_URL: "" },
    timeout: 60_000,
  }).then(
    ({ stdout, stderr }) => ({ code: 0, out: stdout + stderr }),
    (err: { code?: number; stdout?: string; stderr?: string }) => ({
      code: typeof err.code === "number" ? err.code : -1,
      out: `${err.stdout ?? ""}${err.stderr ?? ""}`,
    }),
  );
}

describe("concurrent migrations", () => {
  it("two processes migrating one empty database at the same moment both succeed and apply each migration once", async () => {
    const url = await emptyDb();
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      // A gate both processes stop at: drizzle's own bookkeeping table, created as drizzle creates
      // it and locked, so that both are provably past their start-up and waiting when it opens
      // (two processes merely started together overlap only by luck).
      await db.query("CREATE SCHEMA drizzle");
      await db.query(
        "CREATE TABLE drizzle.__drizzle_migrations (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)",
      );
      await db.query("BEGIN");
      await db.query("LOCK TABLE drizzle.__drizzle_migrations IN ACCESS EXCLUSIVE MODE");
      const a = migrateProcess(url);
      const b = migrateProcess(url);
      await waitUntil(async () => {
        const { rows } = await admin.query(
          "select count(*)::int as n from pg_stat_activity where datname = $1 and wait_event_type = 'Lock'",
          [new URL(url).pathname.slice(1)],
        );
        return rows[0].n >= 2;
      }, 40_000);
      await db.query("COMMIT");
      const [ra, rb] = await Promise.all([a, b]);
      expect({ a: ra.code, b: rb.code, out: ra.code || rb.code ? ra.out + rb.out : "" }).toEqual({
        a: 0,
        b: 0,
        out: "",
      });
      const { rows } = await db.query("select count(*)::int as n from drizzle.__drizzle_migrations");
      expect(rows[0].n).toBe((await journalEntries()).length);
      const jobs = await db.query("select to_regclass('public.jobs') is not null as ok");
      expect(jobs.rows[0].ok).toBe(true);
    } finally {
      await db.end();
    }
  }, 90_000);

  it("a migrator that cannot get the lock within its lock timeout fails and says another migration holds it", async () => {
    const url = await emptyDb();
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      await holder.query("select pg_advisory_lock($1)", [MIGRATE_LOCK_KEY]);
      const started = Date.now();
      await expect(applyMigrations(url, { lockTimeoutMs: 300 })).rejects.toThrow(
        /another migration holds the migration lock.*300 ms/,
      );
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      await holder.end();
    }
  });
});

describe("migration order", () => {
  it("a migration file dated before the last applied one fails loudly instead of being skipped", async () => {
    const url = await emptyDb();
    await applyMigrations(url);
    // A branch merged late: its migration was generated before the last one applied here.
    const dir = await mkdtemp(join(tmpdir(), "ear-migrations-"));
    tmpDirs.push(dir);
    await cp(MIGRATIONS_DIR, dir, { recursive: true });
    const entries = await journalEntries(dir);
    const last = entries[entries.length - 1]!;
    const late = { idx: entries.length, version: "7", when: last.when - 1, tag: "0099_late_branch", breakpoints: true };
    await writeFile(join(dir, `${late.tag}.sql`), "CREATE TABLE late_branch_probe (id integer);");
    await writeFile(
      join(dir, "meta/_journal.json"),
      JSON.stringify({ version: "7", dialect: "postgresql", entries: [...entries, late] }),
    );

    const outcome = await applyMigrations(url, { migrationsFolder: dir }).then(
      () => "applied",
      (err: Error) => err.message,
    );
    const probe = new pg.Client({ connectionString: url });
    await probe.connect();
    const { rows } = await probe.query("select to_regclass('public.late_branch_probe') is not null as exists");
    await probe.end();
    expect({ outcome, tableCreated: rows[0].exists }).toEqual({
      outcome: expect.stringMatching(/0099_late_branch.*older than the last applied migration.*never applied/s),
      tableCreated: false,
    });
  });

  it("an applied migration edited afterwards fails loudly too, naming the file", async () => {
    const url = await emptyDb();
    await applyMigrations(url);
    const dir = await mkdtemp(join(tmpdir(), "ear-migrations-"));
    tmpDirs.push(dir);
    await cp(MIGRATIONS_DIR, dir, { recursive: true });
    const [first] = await journalEntries(dir);
    const file = join(dir, `${first!.tag}.sql`);
    await writeFile(file, `${await readFile(file, "utf8")}\n-- edited after it was applied\n`);
    await expect(applyMigrations(url, { migrationsFolder: dir })).rejects.toThrow(
      new RegExp(`${first!.tag}\\.sql was applied here but its content has changed`),
    );
  });
});

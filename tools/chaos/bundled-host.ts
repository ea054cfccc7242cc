/**
 * Chaos hosts are the real `sandbox-host/main.ts`, bundled once per run with esbuild (the one tsx
 * ships) into `.tmp/chaos/host.mjs`. Why: a host under `node --import tsx` costs ~2 s of CPU to
 * start (transforming and loading ~400 modules), ~0.5 s bundled; the harness spawns a
 * replacement for every SIGKILL, and on 2 cores that difference decides whether 60 kills fit in
 * a few minutes. Same source, same process model; only the loader differs.
 * dockerode stays external (native optional deps); the text-only runner never loads it.
 */
import { mkdir } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { type HostHandle, spawnHost } from "../stack";

export async function bundleHost(root: string): Promise<string> {
  const require = createRequire(join(root, "package.json"));
  const esbuild = require(require.resolve("esbuild", { paths: [require.resolve("tsx")] })) as {
    build(o: Record<string, unknown>): Promise<{ errors: unknown[] }>;
  };
  const outfile = join(root, ".tmp", "chaos", "host.mjs");
  await mkdir(join(root, ".tmp", "chaos"), { recursive: true });
  await esbuild.build({
    entryPoints: [join(root, "sandbox-host", "main.ts")],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outfile,
    external: ["dockerode", "pg-native"],
    // CJS dependencies call require(); give the ESM bundle one.
    banner: { js: 'import { createRequire as __cr } from "node:module"; const require = __cr(import.meta.url);' },
    logLevel: "warning",
  });
  return outfile;
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

/**
 * The web console (console/): a Vite build into dist/console, which wrangler.toml's `[assets]`
 * serves from the gateway Worker (Miniflare serves the same directory in `npm run dev` and the
 * tests). Run directly (`npm run build`, `npm run build:console`) it always builds and prints the
 * bundle's size; `ensureConsoleBuilt` is what the stack and the test configs call: it rebuilds
 * only when the inputs changed, so a fresh clone (`npm ci && npm run dev`) just works and a warm
 * one pays a hash of ~100 small files (a few ms), not a build.
 *
 * The config is here, not in a vite.config.ts: this file is its one home, and it keeps Vite's own
 * config discovery out of the repository root (vitest reads vitest.config.ts there).
 */
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { gzip } from "node:zlib";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** What the build reads: the console, the code it imports from src/, and the locked dependency versions. */
const INPUTS = ["console", "src/contracts", "src/client", "package-lock.json", "tools/build/console.ts"];

export interface ConsoleBuild {
  outDir: string;
  files: Array<{ file: string; bytes: number; gzipBytes: number }>;
  bytes: number;
  gzipBytes: number;
}

async function filesUnder(root: string, rel: string): Promise<string[]> {
  const abs = join(root, rel);
  let s: Awaited<ReturnType<typeof stat>>;
  try {
    s = await stat(abs);
  } catch {
    return [];
  }
  if (!s.isDirectory()) return [rel];
  const out: string[] = [];
  for (const name of (await readdir(abs)).sort()) out.push(...(await filesUnder(root, join(rel, name))));
  return out;
}

/** SHA-256 over every input file's path and bytes: changes whenever what the build reads changes. */
export async function consoleInputsHash(root = ROOT): Promise<string> {
  const h = createHash("sha256");
  for (const rel of INPUTS) {
    for (const file of await filesUnder(root, rel)) {
      h.update(`${file}\0`);
      h.update(await readFile(join(root, file)));
      h.update("\0");
    }
  }
  return h.digest("hex");
}

async function measure(outDir: string): Promise<ConsoleBuild> {
  const files: ConsoleBuild["files"] = [];
  for (const rel of await filesUnder(outDir, ".")) {
    const bytes = await readFile(join(outDir, rel));
    files.push({ file: relative(".", rel), bytes: bytes.length, gzipBytes: (await promisify(gzip)(bytes)).length });
  }
  return {
    outDir,
    files,
    bytes: files.reduce((a, f) => a + f.bytes, 0),
    gzipBytes: files.reduce((a, f) => a + f.gzipBytes, 0),
  };
}

/** Vite's build of console/ into outDir (emptied first). */
export async function buildConsole(outDir = join(ROOT, "dist", "console"), root = ROOT): Promise<ConsoleBuild> {
  // Loaded on demand: the stack imports this file, and a warm start should not load Vite.
  const { build } = await import("vite");
  await build({
    root: join(root, "console"),
    configFile: false,
    // Relative asset URLs: the console works wherever the gateway serves it.
    base: "./",
    logLevel: "warn",
    publicDir: join(root, "console", "public"),
    oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
    build: {
      outDir,
      emptyOutDir: true,
      // The browsers of the last few years; no legacy bundle (the console is an operator's tool).
      target: "es2022",
      // Source maps would double what the gateway serves; the console's code is in the repository.
      sourcemap: false,
      reportCompressedSize: false,
    },
  });
  return measure(outDir);
}

export function describeBuild(b: ConsoleBuild): string {
  const kb = (n: number) => `${(n / 1024).toFixed(1)} KiB`;
  const lines = b.files.map((f) => `  ${f.file.padEnd(36)} ${kb(f.bytes).padStart(10)}  gzip ${kb(f.gzipBytes)}`);
  return `console bundle (${relative(ROOT, b.outDir)}):\n${lines.join("\n")}\n  total ${kb(b.bytes)} raw, ${kb(b.gzipBytes)} gzip`;
}

const STAMP = ".console-build-hash";

/**
 * Builds dist/console unless it was built from these exact inputs. Concurrent callers (test files
 * starting stacks at once) serialise on a lock directory; the build goes to a scratch directory
 * that replaces dist/console by rename, so a gateway starting meanwhile never reads half a build.
 */
export async function ensureConsoleBuilt(root = ROOT, log: (line: string) => void = () => {}): Promise<void> {
  const dist = join(root, "dist");
  const outDir = join(dist, "console");
  const stampFile = join(dist, STAMP);
  const hash = await consoleInputsHash(root);
  const fresh = async () => (await readFile(stampFile, "utf8").catch(() => "")) === hash;
  if (await fresh()) return;
  await mkdir(dist, { recursive: true });
  const lock = join(dist, ".console-build-lock");
  const deadline = Date.now() + 180_000;
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch {
      // A lock older than the deadline is a crashed builder's; take it over.
      const age =
        Date.now() -
        (await stat(lock).then(
          (s) => s.mtimeMs,
          () => Date.now(),
        ));
      if (age > 180_000) await rm(lock, { recursive: true, force: true });
      if (Date.now() > deadline) throw new Error(`waited 180 s for ${lock}; remove it if no build is running`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  try {
    if (await fresh()) return;
    const scratch = join(dist, `.console-${process.pid}-${Date.now()}`);
    const started = Date.now();
    // A failed build (a syntax error while `npm run dev` watches) leaves dist/console as it was.
    const b = await buildConsole(scratch, root).catch(async (err) => {
      await rm(scratch, { recursive: true, force: true });
      throw err;
    });
    const old = `${scratch}-old`;
    await rename(outDir, old).catch(() => {});
    await rename(scratch, outDir);
    await rm(old, { recursive: true, force: true });
    await writeFile(stampFile, hash);
    log(`built the console in ${Date.now() - started} ms (${(b.gzipBytes / 1024).toFixed(1)} KiB gzip)`);
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const b = await buildConsole();
  await writeFile(join(ROOT, "dist", STAMP), await consoleInputsHash());
  console.log(describeBuild(b));
}

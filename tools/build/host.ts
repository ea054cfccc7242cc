/**
 * `npm run build`: the sandbox-host as a bundle that runs with plain `node` from a production
 * install (`npm ci --omit=dev`), no tsx, no checkout:
 *
 *   dist/host/main.mjs   sandbox-host/main.ts and all of our own code (src/, sandbox-host/)
 *   dist/host/worker.js  the offload pool's worker-thread entry; offload/pool.ts starts
 *                        `./worker.js` beside its own module when it is not running from .ts
 *   dist/host/tool-worker.js  the code tools' thread entry (HOST_TOOLS), started the same way
 *
 * npm packages stay external (`packages: "external"`) and come from node_modules: the
 * production install is then what really runs, and a runtime import of a devDependency fails
 * at start (the bundle test, test/integration/host-bundle.test.ts, installs with --omit=dev to
 * catch exactly that) instead of being silently inlined. The Lua lease scripts are read here
 * and inlined as `__EAR_QUOTA_SCRIPTS__` (sandbox-host/quota/load-scripts.ts), so the bundle
 * needs no src/ tree beside it.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { QUOTA_SCRIPT_NAMES } from "../../src/quota/scripts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export async function buildHost(outdir = join(ROOT, "dist", "host")): Promise<{ main: string; worker: string }> {
  const scripts: Record<string, string> = {};
  for (const name of QUOTA_SCRIPT_NAMES) {
    scripts[name] = await readFile(join(ROOT, "src", "quota", "lua", `${name}.lua`), "utf8");
  }
  // Files are overwritten in place, the directory is not emptied first: chaos suites running at
  // once build into the same .tmp/chaos and one must not delete what another's host is loading.
  await mkdir(outdir, { recursive: true });
  const common = {
    bundle: true,
    platform: "node",
    format: "esm",
    // The oldest Node the package supports (package.json engines).
    target: "node20",
    packages: "external",
    sourcemap: "linked",
    // CJS code inside our own modules may call require(); give the ESM output one.
    banner: {
      js: 'import { createRequire as __earCreateRequire } from "node:module"; const require = __earCreateRequire(import.meta.url);',
    },
    logLevel: "warning",
  } as const;
  await build({
    ...common,
    entryPoints: { main: join(ROOT, "sandbox-host", "main.ts") },
    outExtension: { ".js": ".mjs" },
    outdir,
    define: { __EAR_QUOTA_SCRIPTS__: JSON.stringify(scripts) },
  });
  await build({
    ...common,
    entryPoints: {
      worker: join(ROOT, "sandbox-host", "offload", "worker.ts"),
      // The code tools' thread (code-tools/code-tool-pool.ts starts `./tool-worker.js` the same way).
      "tool-worker": join(ROOT, "sandbox-host", "code-tools", "tool-worker.ts"),
    },
    outdir,
  });
  // worker.js is ESM; without a package.json saying so beside it, Node would read it as CommonJS
  // wherever dist/host is copied.
  await writeFile(join(outdir, "package.json"), `${JSON.stringify({ type: "module" }, null, 2)}\n`);
  return { main: join(outdir, "main.mjs"), worker: join(outdir, "worker.js") };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const started = Date.now();
  const out = await buildHost();
  console.log(`built ${out.main} and ${out.worker} in ${Date.now() - started} ms`);
}

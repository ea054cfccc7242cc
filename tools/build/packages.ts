/**
 * The SDK a team installs (docs/sdk.md): one npm package, `edge-agent-runtime`, whose
 * subpath exports are the client entry points, built into dist/pkg — a directory that is the
 * package itself (its own package.json, written here), so `npm pack dist/pkg` (`npm run pack`)
 * gives the tarball a team installs:
 *
 *   client.js   `edge-agent-runtime/client`: EarClient, event types, ApiClientError (no React)
 *   ai-sdk.js   `edge-agent-runtime/ai-sdk`: the useChat transport
 *   react.js    `edge-agent-runtime/react`: the run hooks
 *   tools.js    `edge-agent-runtime/tools`: defineTool, for the hosts' HOST_TOOLS modules
 *   agents.js   `edge-agent-runtime/agents`: defineAgent, agents as code (docs/tools.md)
 *   types/…     tsc declarations, relative imports rewritten to `.js` (node16/nodenext)
 *   bin/ear.js  the `ear` command (tools/ear/): tools build, agents deploy, tokens create
 *
 * Why a generated package.json and not the repo's: the repo's lists the runtime's dependencies
 * (dockerode, pg, OpenTelemetry, the MCP SDK …), which a team's page or backend never loads.
 * This one lists only what the entries import: zod (agents at run time, every entry's types)
 * and eventsource-parser (the client's SSE); `ai`, `react` and `react-dom` are optional peers,
 * so a backend needs none of them and a page has exactly one React and one AI SDK — its own.
 * Its dependency ranges are carets, not the repo's exact pins, so npm can share the team's own
 * zod (one zod, one `z.ZodType` for defineTool's inputs); package-lock.json pins what we test.
 *
 * ESM only. A CommonJS consumer on Node ≥ 20.19 `require()`s it (Node loads ESM without
 * top-level await that way); TypeScript ≥ 5.8 under `module: node20`/`nodenext` types that.
 * Built, not source exports, because Node cannot load our extensionless TypeScript imports and
 * a consumer's bundler should not have to compile them either. `npm run build` runs it with the
 * host and console builds.
 */
import { spawn } from "node:child_process";
import { chmod, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const PKG_OUT = join(ROOT, "dist", "pkg");

/** Each subpath export: its bundle's entry and its declaration file (under types/, tsc's layout of src/). */
const ENTRIES = {
  client: { src: "src/client/entry.ts", types: "client/entry.d.ts" },
  "ai-sdk": { src: "src/ai-sdk/transport.ts", types: "ai-sdk/transport.d.ts" },
  react: { src: "src/react/hooks.ts", types: "react/hooks.d.ts" },
  tools: { src: "src/code-tools/define-tool.ts", types: "code-tools/define-tool.d.ts" },
  agents: { src: "src/code-tools/define-agent.ts", types: "code-tools/define-agent.d.ts" },
} as const;

/** What the entries import at run time or in their declarations, with the repo's tested version as the floor. */
const DEPENDENCIES = ["zod", "eventsource-parser"] as const;
const OPTIONAL_PEERS = {
  ai: "^6.0.0 || ^7.0.0",
  // `ear tools build` and `ear agents deploy` only (the team's own bundler).
  esbuild: ">=0.24.0",
  react: "^18.0.0 || ^19.0.0",
  "react-dom": "^18.0.0 || ^19.0.0",
} as const;

export async function buildPackages(): Promise<void> {
  await rm(PKG_OUT, { recursive: true, force: true });
  await build({
    absWorkingDir: ROOT,
    entryPoints: Object.fromEntries(Object.entries(ENTRIES).map(([name, e]) => [name, e.src])),
    outdir: PKG_OUT,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "neutral",
    // Browsers of the last years and Node ≥ 20 (package.json engines).
    target: "es2022",
    packages: "external",
    sourcemap: "linked",
    logLevel: "warning",
  });
  // The `ear` command (tools/ear/): Node only, so its own bundle, not a chunk the page entries share.
  await build({
    absWorkingDir: ROOT,
    entryPoints: ["tools/ear/bin.ts"],
    outfile: join(PKG_OUT, "bin", "ear.js"),
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node20",
    packages: "external",
    banner: { js: "#!/usr/bin/env node" },
    logLevel: "warning",
  });
  await chmod(join(PKG_OUT, "bin", "ear.js"), 0o755);
  await new Promise<void>((ok, fail) => {
    const tsc = spawn(
      join(ROOT, "node_modules", ".bin", "tsc"),
      ["-p", join(ROOT, "tools", "build", "packages.tsconfig.json")],
      {
        stdio: "inherit",
      },
    );
    tsc.once("error", fail);
    tsc.once("exit", (code) => (code === 0 ? ok() : fail(new Error(`tsc (declarations) exited ${code}`))));
  });
  await addDeclarationExtensions(join(PKG_OUT, "types"));
  await writeFile(join(PKG_OUT, "package.json"), `${JSON.stringify(await manifest(), null, 2)}\n`);
  await writeFile(join(PKG_OUT, "README.md"), await readFile(join(ROOT, "docs", "sdk.md"), "utf8"));
}

/** The published package.json: the SDK's entries and only the SDK's dependencies (see the top of this file). */
async function manifest(): Promise<Record<string, unknown>> {
  const root = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as {
    version: string;
    description: string;
    engines: Record<string, string>;
    dependencies: Record<string, string>;
  };
  const exports: Record<string, unknown> = {};
  for (const [name, e] of Object.entries(ENTRIES)) {
    exports[`./${name}`] = { types: `./types/${e.types}`, default: `./${name}.js` };
  }
  exports["./package.json"] = "./package.json";
  return {
    name: "edge-agent-runtime",
    version: root.version,
    description:
      "Client SDK of the edge agent runtime: typed API client, AI SDK transport, React hooks, defineTool, defineAgent.",
    type: "module",
    sideEffects: false,
    engines: root.engines,
    exports,
    bin: { ear: "./bin/ear.js" },
    dependencies: Object.fromEntries(
      DEPENDENCIES.map((d) => {
        const v = root.dependencies[d];
        if (!v) throw new Error(`package.json has no dependency ${d} to publish`);
        return [d, `^${v}`];
      }),
    ),
    peerDependencies: OPTIONAL_PEERS,
    peerDependenciesMeta: Object.fromEntries(Object.keys(OPTIONAL_PEERS).map((p) => [p, { optional: true }])),
  };
}

/**
 * tsc keeps our extensionless relative imports in the declarations; node16/nodenext resolution
 * refuses those in an ESM package (TS2834). Each becomes the file it names, `./x.js` for
 * `./x.d.ts` or `./x/index.js` for a directory; one it cannot place fails the build.
 */
async function addDeclarationExtensions(dir: string): Promise<void> {
  const files = (await readdir(dir, { recursive: true })).filter((f) => f.endsWith(".d.ts")).map((f) => join(dir, f));
  const isFile = (p: string) =>
    stat(p).then(
      (s) => s.isFile(),
      () => false,
    );
  for (const file of files) {
    const text = await readFile(file, "utf8");
    const specifiers = new Set([...text.matchAll(/(?:from |import\()"(\.\.?\/[^"]*)"/g)].map((m) => m[1] as string));
    const rewrites = new Map<string, string>();
    for (const spec of specifiers) {
      if (spec.endsWith(".js")) continue;
      const base = resolve(dirname(file), spec);
      if (await isFile(`${base}.d.ts`)) rewrites.set(spec, `${spec}.js`);
      else if (await isFile(join(base, "index.d.ts"))) rewrites.set(spec, `${spec}/index.js`);
      else throw new Error(`${file}: cannot place the import "${spec}"`);
    }
    const out = text.replace(/(from |import\()"(\.\.?\/[^"]*)"/g, (all, lead: string, spec: string) => {
      const to = rewrites.get(spec);
      return to ? `${lead}"${to}"` : all;
    });
    if (out !== text) await writeFile(file, out);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await buildPackages();
  console.log(`packages: ${PKG_OUT}`);
}

/**
 * `ear`, the SDK package's command (package.json "bin" of the published package, built by
 * tools/build/packages.ts into bin/ear.js): what a team runs from its own repository, with
 * plain Node and no checkout of the runtime (docs/sdk.md "The ear command").
 *
 *   ear tools build <module…> [--out F]   the team's code tools (defineTool), bundled with their
 *                                        imports into one ESM file a production host loads
 *                                        (HOST_TOOLS=F, docs/deploy.md); default dist/tools.mjs
 *   ear agents deploy <dir|file> [--dry-run]  agents as code (defineAgent) → the tenant's agents,
 *                                        a new version only for a changed definition
 *   ear tokens create [--scope S] [--ttl-s N] [--conversation ID | --job ID]
 *
 * The gateway and credential: EAR_URL and EAR_API_KEY (the tenant's API key); everything goes
 * through the public API, so every gateway check applies and no database URL is needed. Tenants
 * and API keys have no HTTP API (the gateway authenticates with a key; it does not make them):
 * `ear tenant …` and `ear key …` say so and point at the operator CLI (docs/deploy.md §6).
 *
 * esbuild (for `tools build`, and to load `agents deploy`'s TypeScript on a Node without type
 * stripping) is an optional peer dependency: the team's own, imported only by those commands.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { EarClient } from "../../src/client/client";
import { isCodeTool } from "../../src/code-tools/define-tool";
import { deployAgents, loadAgents } from "../cli/agents-deploy";

const USAGE = `usage: ear <command>
  tools build <module…> [--out dist/tools.mjs]
  agents deploy <dir|file> [--dry-run]
  tokens create [--scope read|write] [--ttl-s N] [--conversation ID | --job ID]
EAR_URL (the gateway) and EAR_API_KEY (the tenant's API key) select where agents and tokens go.`;

const NO_ADMIN_API = `tenants and API keys have no HTTP API: the gateway checks keys, it does not make them.
Create them with the operator CLI from a checkout of the runtime, against the database:
  DATABASE_URL=… npm run cli -- tenant create <id>      (docs/deploy.md, "Tenants, against production")`;

type Esbuild = typeof import("esbuild");

async function esbuild(): Promise<Esbuild> {
  try {
    return (await import("esbuild")) as Esbuild;
  } catch {
    throw new Error("this command needs esbuild: npm install --save-dev esbuild");
  }
}

function target(): { baseUrl: string; apiKey: string } {
  const baseUrl = process.env.EAR_URL;
  const apiKey = process.env.EAR_API_KEY;
  if (!baseUrl || !apiKey) throw new Error("set EAR_URL (the gateway) and EAR_API_KEY (the tenant's API key)");
  return { baseUrl, apiKey };
}

/**
 * One ESM file holding the modules and everything they import (the SDK's defineTool, zod, the
 * team's own code), for Node ≥ 20: a host loads it with no node_modules beside it. Node's
 * built-ins stay imports; a CommonJS dependency that calls `require` gets one (createRequire).
 * The file is then imported here once: a module that does not load or exports no tool fails
 * the build, not the host's start.
 */
export async function buildTools(entries: string[], out: string): Promise<string[]> {
  const { build } = await esbuild();
  const abs = resolve(out);
  await mkdir(dirname(abs), { recursive: true });
  // Every export of every module, default ones included, in one array: the host looks for tools
  // among a module's exports and one level into arrays (sandbox-host/code-tools/tool-modules.ts).
  const stdin = [
    ...entries.map((e, i) => `import * as m${i} from ${JSON.stringify(resolve(e))};`),
    `export const tools = [${entries.map((_, i) => `...Object.values(m${i})`).join(", ")}];`,
  ].join("\n");
  await build({
    stdin: { contents: stdin, resolveDir: process.cwd(), loader: "js" },
    outfile: abs,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    sourcemap: "linked",
    logLevel: "warning",
    banner: {
      js: 'import { createRequire as __earRequire } from "node:module"; const require = __earRequire(import.meta.url);',
    },
  });
  const mod = (await import(`${pathToFileURL(abs).href}?t=${Date.now()}`)) as Record<string, unknown>;
  const names = Object.values(mod)
    .flatMap((v) => (Array.isArray(v) ? v : [v]))
    .filter(isCodeTool)
    .map((t) => t.name);
  if (names.length === 0) throw new Error(`${entries.join(", ")}: no tool made by defineTool is exported`);
  return [...new Set(names)].sort();
}

/** An agent module through esbuild (TypeScript on any Node), its packages left to the team's node_modules. */
async function importBundled(file: string): Promise<Record<string, unknown>> {
  const { build } = await esbuild();
  // Beside the file, so its bare imports resolve from the same node_modules as the source's.
  const dir = await mkdtemp(join(dirname(file), ".ear-"));
  try {
    const out = join(dir, "agent.mjs");
    await build({
      entryPoints: [file],
      outfile: out,
      bundle: true,
      packages: "external",
      platform: "node",
      format: "esm",
      target: "node20",
      logLevel: "warning",
    });
    return (await import(pathToFileURL(out).href)) as Record<string, unknown>;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      out: { type: "string" },
      "dry-run": { type: "boolean" },
      scope: { type: "string" },
      "ttl-s": { type: "string" },
      conversation: { type: "string" },
      job: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  const [noun, verb, ...rest] = positionals;
  if (values.help || !noun) {
    console.log(USAGE);
    return values.help ? 0 : 2;
  }
  if (noun === "tools" && verb === "build" && rest.length > 0) {
    const out = values.out ?? join("dist", "tools.mjs");
    const names = await buildTools(rest, out);
    console.log(`${out}: ${names.length} tool${names.length === 1 ? "" : "s"} (${names.join(", ")})`);
    console.log(`a host loads it with HOST_TOOLS=${out}`);
    return 0;
  }
  if (noun === "agents" && verb === "deploy" && rest[0]) {
    const agents = await loadAgents(rest[0], importBundled);
    await deployAgents(target(), agents, { dryRun: values["dry-run"] === true, out: (line) => console.log(line) });
    return 0;
  }
  if (noun === "tokens" && verb === "create") {
    const { baseUrl, apiKey } = target();
    const scope = values.scope ?? "read";
    if (scope !== "read" && scope !== "write") throw new Error(`--scope is read or write, got "${scope}"`);
    const minted = await new EarClient({ baseUrl, credential: apiKey }).createToken({
      scope,
      ...(values["ttl-s"] ? { ttl_s: Number(values["ttl-s"]) } : {}),
      ...(values.conversation ? { conversation_id: values.conversation } : {}),
      ...(values.job ? { job_id: values.job } : {}),
    });
    console.log(minted.token);
    console.error(`(${minted.scope}, expires ${minted.expires_at})`);
    return 0;
  }
  if (noun === "tenant" || noun === "key") {
    console.error(NO_ADMIN_API);
    return 2;
  }
  console.error(USAGE);
  return 2;
}

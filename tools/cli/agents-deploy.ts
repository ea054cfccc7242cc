/**
 * `npm run cli -- agents deploy <dir|file> [--dry-run]`: agents as code (defineAgent,
 * `edge-agent-runtime/agents`) made the tenant's agents through the public API, so every
 * gateway check applies (model offered, tools in the catalog, MCP URLs and secrets). For each
 * agent found: absent → created (version 1); its latest version's definition differs → a new
 * version; the same → nothing. What changed is printed field by field; `--dry-run` prints it and
 * writes nothing. Running it again with the same files changes nothing (idempotent).
 *
 * The gateway and key: EAR_URL and EAR_API_KEY, else the running dev stack's .dev/stack.json.
 * A directory means the modules directly in it (.ts, .mts, .js, .mjs), in name order.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { EarClient } from "../../src/client/client";
import { ApiClientError } from "../../src/client/http";
import { type AgentDefinitionOf, agentBody, isDefinedAgent } from "../../src/code-tools/define-agent";
import { AgentDefinitionSchema, type AgentView, type CreateAgentBody } from "../../src/contracts/agent";

export interface DeployTarget {
  baseUrl: string;
  apiKey: string;
}

export async function deployTarget(env: Record<string, string | undefined>, cwd: string): Promise<DeployTarget> {
  if (env.EAR_URL && env.EAR_API_KEY) return { baseUrl: env.EAR_URL, apiKey: env.EAR_API_KEY };
  const file = join(cwd, ".dev", "stack.json");
  try {
    const stack = JSON.parse(await readFile(file, "utf8")) as { gateway_url?: string; api_key?: string };
    if (stack.gateway_url && stack.api_key) return { baseUrl: stack.gateway_url, apiKey: stack.api_key };
  } catch {}
  throw new Error(`set EAR_URL and EAR_API_KEY, or start the dev stack (npm run dev) so ${file} exists`);
}

/** The agents a file exports, or every module's directly in a directory; a name twice is an error. */
export async function loadAgents(
  path: string,
  // The package's `ear` loads TypeScript through esbuild (plain Node 20 cannot); `npm run cli` runs under tsx.
  importModule: (file: string) => Promise<Record<string, unknown>> = (file) => import(pathToFileURL(file).href),
): Promise<Array<{ agent: AgentDefinitionOf; file: string }>> {
  const abs = resolve(path);
  const info = await stat(abs).catch(() => null);
  if (!info) throw new Error(`${path}: no such file or directory`);
  const files = info.isDirectory()
    ? (await readdir(abs))
        .filter((f) => /\.(m?ts|m?js)$/.test(f) && !f.endsWith(".d.ts"))
        .sort()
        .map((f) => join(abs, f))
    : [abs];
  const found: Array<{ agent: AgentDefinitionOf; file: string }> = [];
  const seen = new Map<string, string>();
  for (const file of files) {
    const mod = await importModule(file);
    for (const value of Object.values(mod)) {
      for (const agent of Array.isArray(value) ? value : [value]) {
        if (!isDefinedAgent(agent) || found.some((f) => f.agent === agent)) continue;
        const other = seen.get(agent.name);
        if (other) throw new Error(`agent "${agent.name}" is defined twice (in ${other} and in ${file})`);
        seen.set(agent.name, file);
        found.push({ agent, file });
      }
    }
  }
  if (found.length === 0) throw new Error(`${path}: no agent made by defineAgent is exported`);
  return found;
}

type Definition = Omit<CreateAgentBody, "name">;

/** A view's definition part, through the schema so fields a stored version predates get their defaults. */
function definitionOfView(view: AgentView): Definition {
  const { name: _n, version: _v, latest_version: _l, created_at: _c, archived_at: _a, ...definition } = view;
  return AgentDefinitionSchema.parse(definition);
}

/** JSON with object keys sorted: equal definitions print equal. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_k, v) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );
}

/** Field by field: `  field: old → new` for each top-level field that differs. */
export function definitionDiff(before: Definition | null, after: Definition): string[] {
  const keys = [...new Set([...Object.keys(before ?? {}), ...Object.keys(after)])].sort();
  const lines: string[] = [];
  for (const k of keys) {
    const a = before ? canonical((before as Record<string, unknown>)[k]) : undefined;
    const b = canonical((after as Record<string, unknown>)[k]);
    if (a === b) continue;
    lines.push(a === undefined ? `  ${k}: ${b}` : `  ${k}: ${a} → ${b}`);
  }
  return lines;
}

export type DeployOutcome = "created" | "new_version" | "unchanged" | "would_create" | "would_version";

export async function deployAgents(
  target: DeployTarget,
  agents: ReadonlyArray<{ agent: AgentDefinitionOf }>,
  opts: { dryRun: boolean; out: (line: string) => void },
): Promise<Array<{ name: string; outcome: DeployOutcome; version: number | null }>> {
  const client = new EarClient({ baseUrl: target.baseUrl, credential: target.apiKey });
  const results: Array<{ name: string; outcome: DeployOutcome; version: number | null }> = [];
  for (const { agent } of agents) {
    const { name, ...desired } = agentBody(agent);
    let current: AgentView | null = null;
    try {
      current = (await client.getAgent(name)).agent;
    } catch (err) {
      if (!(err instanceof ApiClientError && err.status === 404)) throw err;
    }
    if (current?.archived_at) throw new Error(`agent "${name}" is archived; it takes no new versions`);
    const before = current ? definitionOfView(current) : null;
    const diff = definitionDiff(before, desired);
    if (current && diff.length === 0) {
      opts.out(`${name}: unchanged (version ${current.version})`);
      results.push({ name, outcome: "unchanged", version: current.version });
      continue;
    }
    if (opts.dryRun) {
      opts.out(
        current ? `${name}: would create version ${current.latest_version + 1}` : `${name}: would create (version 1)`,
      );
      for (const line of diff) opts.out(line);
      results.push({ name, outcome: current ? "would_version" : "would_create", version: null });
      continue;
    }
    const written = current
      ? (await client.createAgentVersion(name, desired)).agent
      : (await client.createAgent({ name, ...desired })).agent;
    opts.out(current ? `${name}: version ${written.version} created` : `${name}: created (version 1)`);
    for (const line of diff) opts.out(line);
    results.push({ name, outcome: current ? "new_version" : "created", version: written.version });
  }
  return results;
}

/**
 * `npm run dev`: the whole local stack in one command. Prints the gateway URL, the web console's
 * URL (signed in with the dev key) and a dev API key,
 * writes .dev/stack.json for tools (load generator, `npm run host`, the CLI), and on Ctrl-C / SIGTERM
 * stops every child it started and removes what it made outside .dev/.
 *
 * Its data stays in .dev/ across restarts: the embedded Postgres's data dir (.dev/postgres), the
 * Durable Objects' state (.dev/durable-objects: a job's event log lives there, so a job kept in
 * Postgres without it would have no stream), the R2 bucket of artifacts (.dev/r2) and the dev key
 * (.dev/dev-key.json). `npm run dev -- --fresh` removes all four first and starts empty. Environment (all optional):
 *   DATABASE_URL                       use this Postgres instead of an embedded one
 *   REDIS_URL                          use this Redis (behind the local Upstash bridge)
 *   UPSTASH_REDIS_REST_URL/_TOKEN      use a real Upstash endpoint directly
 *   MODEL_BASE_URL/MODEL_API_KEY/MODEL_NAME   a real OpenAI-compatible provider (else the mock model)
 *   MODELS                             the models clients may name (default: just MODEL_NAME)
 *   MODEL_REGISTRY                     the operator's model registry (JSON), given to the gateway and every host
 *   RATE_LIMIT_REQUESTS, RATE_LIMIT_WINDOW_S, MAX_STREAMS_PER_TENANT, MAX_QUEUED_JOBS_PER_TENANT,
 *   MAX_AGENTS_PER_TENANT, MAX_VERSIONS_PER_AGENT, MAX_AGENT_BYTES_PER_TENANT
 *                                      the gateway's abuse limits (README; unset = their defaults)
 *   CORS_ALLOWED_ORIGINS               origins whose pages may call the gateway (dev-only default:
 *                                      http://localhost:* and http://127.0.0.1:*, tools/stack/dev-defaults.ts)
 *   MCP_ALLOWED_URLS, MCP_SECRET_NAMES  MCP for agents, to the gateway (and, with MCP_SECRETS, every host);
 *                                      dev-only default: any port of 127.0.0.1 and localhost
 *   WEBHOOK_ALLOWED_URLS                where webhook endpoints may be, to the gateway and every host
 *                                      (dev-only default: any port of 127.0.0.1 and localhost)
 *   any other sandbox-host variable    (HOST_TOOLS, HOST_MAX_RUNS…) to every host, and recorded in
 *                                      stack.json's host_env for `npm run host` (tools/stack/host-env.ts)
 *   MOCK_TTFT_MS, MOCK_TOKENS_PER_S, MOCK_MAX_CONCURRENCY   mock model behaviour
 *   DEV_HOSTS (default 1), GATEWAY_PORT (default 8787)
 *   DEV_DIR                            where the above lives (default .dev in the checkout)
 *   GATEWAY_RUNNER                     miniflare (default) or wrangler (`wrangler dev`), see
 *                                      tools/stack/services/gateway.ts
 */
import { readFileSync } from "node:fs";
import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import { join, relative, resolve } from "node:path";
import { devOnlyDefaults } from "./dev-defaults";
import { openDevLogs } from "./dev-logs";
import { hostSettingsFrom } from "./host-env";
import { ownShutdownSignals } from "./services/process";
import { type Stack, startStack } from "./start";

const root = resolve(process.cwd());
const env = process.env;
const devDir = resolve(root, env.DEV_DIR || ".dev");
/** What `--fresh` removes: the data a restart keeps. */
const kept = {
  postgres: join(devDir, "postgres"),
  durableObjects: join(devDir, "durable-objects"),
  /** Miniflare's R2: the BLOBS bucket (artifacts). */
  r2: join(devDir, "r2"),
  keyFile: join(devDir, "dev-key.json"),
};
const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== "--fresh");
if (unknown.length > 0) {
  console.error(`unknown argument ${unknown[0]}: the one option is --fresh (start with empty data)`);
  process.exit(2);
}
const fresh = args.includes("--fresh");
/** The gateway variables a developer may set for `npm run dev` (workers/gateway-config.ts). */
const GATEWAY_LIMIT_VARS = [
  "RATE_LIMIT_REQUESTS",
  "RATE_LIMIT_WINDOW_S",
  "MAX_STREAMS_PER_TENANT",
  "MAX_QUEUED_JOBS_PER_TENANT",
  "MAX_AGENTS_PER_TENANT",
  "MAX_VERSIONS_PER_AGENT",
  "MAX_AGENT_BYTES_PER_TENANT",
  "CORS_ALLOWED_ORIGINS",
  // MCP: the hosts get these (and MCP_SECRETS / MCP_SECRETS_FILE) from this process's environment.
  "MCP_ALLOWED_URLS",
  "MCP_SECRET_NAMES",
  // Webhooks: the hosts read the same list from this process's environment.
  "WEBHOOK_ALLOWED_URLS",
] as const;
const started = Date.now();

function intEnv(name: string): number | undefined {
  const v = env[name];
  if (v === undefined || v === "") return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) {
    console.error(`${name} must be a non-negative integer, got "${v}"`);
    process.exit(2);
  }
  return n;
}

// The gateway's and the hosts' lines go to DEV_DIR/logs (tools/stack/dev-logs.ts); what else they
// print (a crash, wrangler's own messages, the gateway's reloads), and every other process's lines,
// are shown here as well.
const logs = await openDevLogs(devDir);
function say(source: string, line: string) {
  const ours = logs.write(source, line);
  if (ours && line.startsWith("{")) return;
  console.log(`[${source}] ${line}`);
}

const stackFile = join(devDir, "stack.json");

async function writeStackFile(stack: Stack) {
  await mkdir(devDir, { recursive: true });
  const tmp = `${stackFile}.${process.pid}`;
  await writeFile(tmp, `${JSON.stringify(stack.describe(), null, 2)}\n`, { mode: 0o600 });
  await rename(tmp, stackFile);
}

/** The dev-only allowances this start applied, as lines for the banner. */
function devOnlyNote(applied: Partial<Record<string, string>>): string {
  const names = Object.keys(applied);
  if (names.length === 0) return "";
  const rows = names.map((n) => `  ${n}=${applied[n]}`).join("\n");
  return `dev only (never a deployment's default; set a variable to replace it):\n${rows}\n\n`;
}

/**
 * The console, signed in: the key rides in the URL fragment, which a browser never sends to a
 * server (so it is in no access log), and the console removes it from the address bar at once.
 */
function consoleUrl(s: Stack): string {
  return `${s.gatewayUrl}/#key=${encodeURIComponent(s.apiKey)}`;
}

/** The start under way or done; a stop during a start waits for it (it cleans up after itself when it fails). */
let starting: Promise<Stack> | null = null;
let stopping = false;
async function shutdown(code: number) {
  if (stopping) return;
  stopping = true;
  console.log("\nstopping the stack…");
  await rm(stackFile, { force: true });
  const stack = await starting?.catch(() => null);
  await stack?.stop();
  await logs.close();
  console.log("stopped.");
  process.exit(code);
}
ownShutdownSignals(() => void shutdown(0));
watchLauncher(() => void shutdown(0));

/**
 * `npm run dev` is npm → sh → node. Ctrl-C reaches all three, but a SIGTERM sent to npm alone is
 * not forwarded (npm 11 exits and leaves us running), so we also stop when our parent or
 * grandparent goes away.
 */
function watchLauncher(onGone: () => void) {
  const ancestors = [process.ppid];
  try {
    const stat = readFileSync(`/proc/${process.ppid}/stat`, "utf8"); // startup only
    const grandparent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (grandparent > 1) ancestors.push(grandparent);
  } catch {}
  setInterval(() => {
    for (const pid of ancestors) {
      try {
        process.kill(pid, 0);
      } catch {
        onGone();
        return;
      }
    }
  }, 500).unref();
}

try {
  if ((env.UPSTASH_REDIS_REST_URL === undefined) !== (env.UPSTASH_REDIS_REST_TOKEN === undefined)) {
    throw new Error("set both UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN, or neither");
  }
  if (env.MODEL_BASE_URL && !env.MODEL_NAME) throw new Error("MODEL_BASE_URL is set: set MODEL_NAME too");
  if (fresh) for (const path of Object.values(kept)) await rm(path, { recursive: true, force: true });
  const devOnly = devOnlyDefaults(env);
  const chosen: Record<string, string | undefined> = { ...env, ...devOnly };
  starting = startStack({
    root,
    databaseUrl: env.DATABASE_URL || undefined,
    postgresDataDir: kept.postgres,
    persistTo: kept.durableObjects,
    r2PersistTo: kept.r2,
    keyFile: kept.keyFile,
    redisUrl: env.REDIS_URL || undefined,
    upstash: env.UPSTASH_REDIS_REST_URL
      ? { url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN as string }
      : undefined,
    model: env.MODEL_BASE_URL
      ? { baseUrl: env.MODEL_BASE_URL, apiKey: env.MODEL_API_KEY ?? "", name: env.MODEL_NAME as string }
      : undefined,
    mockModel: {
      ttftMs: intEnv("MOCK_TTFT_MS"),
      tokensPerS: intEnv("MOCK_TOKENS_PER_S"),
      maxConcurrency: intEnv("MOCK_MAX_CONCURRENCY"),
    },
    models: env.MODELS || undefined,
    modelRegistry: env.MODEL_REGISTRY || undefined,
    gatewayVars: Object.fromEntries(
      GATEWAY_LIMIT_VARS.flatMap((name) => (chosen[name] ? [[name, chosen[name] as string]] : [])),
    ),
    // Named rather than inherited, so stack.json records them for `npm run host`.
    hostEnv: hostSettingsFrom(chosen),
    hosts: intEnv("DEV_HOSTS") ?? 1,
    gatewayPort: intEnv("GATEWAY_PORT") ?? 8787,
    watchGateway: true,
    log: say,
  });
  const stack = await starting;
  if (stopping) await new Promise(() => {}); // the stop under way ends the process
  await writeStackFile(stack);
  for (const h of stack.hosts) {
    h.process.once("exit", (c, s) => {
      if (!stopping) console.error(`[host] ${h.id} exited (${c ?? s}); the rest of the stack keeps running`);
    });
  }
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`
edge agent runtime: local stack ready in ${seconds} s
  gateway   ${stack.gatewayUrl}
  console   ${consoleUrl(stack)}   (opens signed in)
  api key   ${stack.apiKey}   (tenant "${stack.tenantId}")
  model     ${stack.modelUrl}${stack.mockModel ? " (mock)" : ""}
  hosts     ${stack.hosts.map((h) => `${h.id} ${h.metricsUrl}`).join("\n            ")}
  details   ${relative(root, stackFile)}
  logs      ${relative(root, logs.paths.gateway)}, ${relative(root, logs.paths.hosts)}   (tail -f to follow)
  data      kept in ${relative(root, devDir)}/ across restarts (${fresh ? "started empty: --fresh" : "`npm run dev -- --fresh` starts empty"})

${devOnlyNote(devOnly)}try it:
  npm run demo -- "hello"

Ctrl-C stops everything.`);
} catch (err) {
  console.error(`\nthe stack did not start: ${err instanceof Error ? err.message : String(err)}`);
  await shutdown(1);
}

/**
 * The whole local stack, started in dependency order: Postgres (embedded unless DATABASE_URL),
 * migrations, Redis (redis-server from PATH unless REDIS_URL / UPSTASH_REDIS_REST_URL), the two
 * local bridges, the mock model (unless MODEL_BASE_URL), the gateway under wrangler dev, a dev
 * tenant + API key, and N sandbox-hosts. `npm run dev` and the end-to-end tests both use it, so
 * the tests exercise exactly what a developer runs.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { connectDocker } from "../../sandbox-host/sandbox/docker";
import { LABEL_HOST, LABEL_SANDBOX } from "../../sandbox-host/sandbox/manager";
import type { Db } from "../../src/db/client";
import { findTenantIdByKeyHash } from "../../src/db/jobs-repo";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { hashApiKey, looksLikeApiKey } from "../../src/domain/api-keys";
import { ensureSandboxImage as buildImageIfStale, LOCAL_SANDBOX_IMAGE } from "../build/sandbox-image";
import { type MockModelControl, mockModelControl } from "../mock-model/remote";
import { hostSecretsIn } from "./host-env";
import { applyMigrations } from "./migrate";
import { startChildService } from "./services/child-service";
import { startGateway } from "./services/gateway";
import { startPostgres } from "./services/postgres";
import { killOnExit, stopProcessGroup } from "./services/process";
import { type RedisService, startRedis } from "./services/redis";
import { makeOwnedTempDir, removeOwnedTempDir } from "./services/temp-dirs";

export interface StackOptions {
  root?: string;
  /** Use this Postgres instead of starting an embedded one. */
  databaseUrl?: string;
  /** Use this Redis (redis://) behind the local bridge instead of starting redis-server. */
  redisUrl?: string;
  /** Use this Upstash REST endpoint directly (no local Redis, no bridge). */
  upstash?: { url: string; token: string };
  /** Use this OpenAI-compatible provider instead of the mock model. */
  model?: { baseUrl: string; apiKey: string; name: string };
  mockModel?: { ttftMs?: number; tokensPerS?: number; maxConcurrency?: number };
  /** Processes behind the pg bridge's one port (default 1; docs/architecture.md, "The local stack's processes and drivers"). */
  pgBridgeWorkers?: number;
  /** The same for the Upstash REST bridge (default 1). */
  upstashBridgeWorkers?: number;
  /** MODELS for the gateway and the hosts (default: just the model's name). */
  models?: string;
  /** MODEL_REGISTRY (JSON) for the gateway and the hosts, the same text for both; unset by default. */
  modelRegistry?: string;
  /** Extra gateway variables (the limits in workers/gateway-config.ts, SSE_HEARTBEAT_MS). */
  gatewayVars?: Record<string, string>;
  hosts?: number;
  hostEnv?: Record<string, string>;
  gatewayPort?: number;
  /** Rebuild and reload the gateway when workers/ or src/ change (`npm run dev`). */
  watchGateway?: boolean;
  /** Where Durable Object state lives; default a throwaway dir in /dev/shm, removed at stop. */
  persistTo?: string;
  /** Where Miniflare's R2 keeps the BLOBS bucket; default `r2` inside persistTo. */
  r2PersistTo?: string;
  /** The embedded Postgres's data dir, kept across stops; default a throwaway one. */
  postgresDataDir?: string;
  /**
   * A file (JSON, mode 0600) holding the dev tenant's API key: its key is used again while it
   * still authenticates against this database, else a new key is made and written there. Unset:
   * a new key at every start.
   */
  keyFile?: string;
  log?: (source: string, line: string) => void;
}

export interface HostHandle {
  id: string;
  metricsUrl: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

export interface Stack {
  gatewayUrl: string;
  apiKey: string;
  tenantId: string;
  databaseUrl: string;
  redisUrl: string | null;
  upstash: { url: string; token: string };
  modelUrl: string;
  modelName: string;
  signingSecret: string;
  hosts: HostHandle[];
  /** The mock model's counters and controls (it runs in a process of its own); null with a real provider. */
  mockModel: MockModelControl | null;
  /** The redis-server this stack started (null when an external Redis/Upstash was given). */
  redis: RedisService | null;
  /** Start one more sandbox-host joined to this stack. */
  addHost(extraEnv?: Record<string, string>): Promise<HostHandle>;
  /** Env a sandbox-host of this stack needs (for spawning hosts by hand, e.g. chaos tests). */
  hostEnv(extra?: Record<string, string>): Record<string, string>;
  stop(): Promise<void>;
  /** The `.dev/stack.json` document. */
  describe(): Record<string, unknown>;
}

export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const root = resolve(opts.root ?? process.cwd());
  const log = opts.log ?? (() => {});
  const cleanups: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    for (const fn of cleanups.splice(0).reverse()) await fn().catch((e) => log("stack", `stop error: ${e}`));
  };
  try {
    // Postgres
    let databaseUrl = opts.databaseUrl;
    if (!databaseUrl) {
      const pgService = await startPostgres({ dataDir: opts.postgresDataDir });
      cleanups.push(() => pgService.stop());
      databaseUrl = pgService.url;
      log("postgres", `embedded Postgres on ${pgService.host}:${pgService.port}`);
    }
    await applyMigrations(databaseUrl);

    // Redis (through the Upstash REST bridge unless a real Upstash endpoint is given)
    let upstash = opts.upstash;
    let redisUrl: string | null = opts.redisUrl ?? null;
    let redisService: RedisService | null = null;
    if (!upstash && !redisUrl) {
      const redis = await startRedis();
      redisService = redis;
      cleanups.push(() => redis.stop());
      redisUrl = redis.url;
      log("redis", `redis-server on ${redis.url}`);
    }

    // The stack's own Node services, each a process of its own and started together: inside the
    // process that starts the stack they shared its event loop, and `npm run load --self-start`
    // drives its clients from that loop (docs/architecture.md, "The local stack's processes and
    // drivers"). Each is registered for stopping as soon as it is up, so a failure of another
    // stops it too.
    const service = async (name: string, source: string, script: string, args: string[], env = {}) => {
      const child = await startChildService({
        name,
        cwd: root,
        argv: ["--import", "tsx", fileURLToPath(new URL(script, import.meta.url)), ...args],
        env,
        // Its own variables would override what the stack asks for (a port, a key, failures).
        dropEnv: ["MOCK_MODEL_", "PG_PROXY_", "UPSTASH_BRIDGE_"],
        ready: (line) =>
          /^(?:pg-proxy|upstash-bridge) listening on (\S+)/.exec(line)?.[1] ??
          /^(http:\/\/\S+)$/.exec(line)?.[1] ??
          null,
        log: (line) => log(source, line),
      });
      cleanups.push(() => child.stop());
      return child.value;
    };
    const token = randomBytes(16).toString("hex");
    const redisFront = upstash ? null : (redisUrl as string);
    const started = await Promise.allSettled([
      redisFront === null
        ? Promise.resolve(null)
        : service(
            "the Upstash REST bridge",
            "bridge",
            "../bridges/upstash-rest/main.ts",
            [
              ...["--redis-url", redisFront, "--host", "127.0.0.1", "--port", "0"],
              ...["--workers", String(opts.upstashBridgeWorkers ?? 1)],
            ],
            { UPSTASH_BRIDGE_TOKEN: token },
          ),
      // The database URL (with its password) goes by environment, not argv, which `ps` shows.
      service(
        "the pg bridge",
        "bridge",
        "../bridges/pg-proxy/main.ts",
        ["--host", "127.0.0.1", "--port", "0", "--workers", String(opts.pgBridgeWorkers ?? 1)],
        { DATABASE_URL: databaseUrl },
      ),
      opts.model
        ? Promise.resolve(null)
        : service("the mock model", "model", "../mock-model/main.ts", [
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            ...(opts.mockModel?.maxConcurrency === undefined
              ? []
              : ["--max-concurrency", String(opts.mockModel.maxConcurrency)]),
            ...(opts.mockModel?.ttftMs === undefined ? [] : ["--ttft-ms", String(opts.mockModel.ttftMs)]),
            ...(opts.mockModel?.tokensPerS === undefined ? [] : ["--tokens-per-s", String(opts.mockModel.tokensPerS)]),
          ]),
    ]);
    const failed = started.find((r) => r.status === "rejected");
    if (failed) throw (failed as PromiseRejectedResult).reason;
    const [bridgeUrl, proxyUrl, mockUrl] = started.map((r) => (r as PromiseFulfilledResult<string | null>).value);
    if (bridgeUrl) {
      upstash = { url: bridgeUrl, token };
      log("bridge", `Upstash REST bridge on ${bridgeUrl} → ${redisFront}`);
    }
    log("bridge", `Postgres proxy on ${proxyUrl}`);
    let mockModel: Stack["mockModel"] = null;
    let model = opts.model;
    if (mockUrl) {
      mockModel = mockModelControl(mockUrl);
      model = { baseUrl: mockUrl, apiKey: "mock", name: "mock-model" };
      log("model", `mock model on ${mockUrl}`);
    }
    if (!upstash || !model) throw new Error("unreachable: the Upstash endpoint and the model are set above");

    // The local sandbox image, when a Docker engine is there (tool runs need it; text runs do not).
    await ensureSandboxImage(log);

    // Gateway
    const signingSecret = randomBytes(32).toString("hex");
    let persistTo = opts.persistTo;
    if (!persistTo) {
      const dir = await makeOwnedTempDir("ear-do-");
      cleanups.push(() => removeOwnedTempDir(dir));
      persistTo = dir;
    }
    const gateway = await startGateway({
      root,
      port: opts.gatewayPort,
      persistTo,
      r2PersistTo: opts.r2PersistTo,
      watch: opts.watchGateway,
      vars: {
        DATABASE_URL: databaseUrl,
        NEON_FETCH_ENDPOINT: `${proxyUrl}/sql`,
        UPSTASH_REDIS_REST_URL: upstash.url,
        UPSTASH_REDIS_REST_TOKEN: upstash.token,
        INTERNAL_SIGNING_SECRET: signingSecret,
        MODELS: opts.models ?? model.name,
        ...(opts.modelRegistry === undefined ? {} : { MODEL_REGISTRY: opts.modelRegistry }),
        ...opts.gatewayVars,
      },
      log: (line) => log("gateway", line),
    });
    cleanups.push(() => gateway.stop());
    log("gateway", `gateway on ${gateway.url} (workerd via ${gateway.runner})`);

    // A dev tenant and key
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
    let apiKey: string;
    const tenantId = "dev";
    try {
      const db = drizzle(pool, { schema });
      await createTenant(db, tenantId, "Local development");
      const kept = opts.keyFile ? await keptKey(db, opts.keyFile, tenantId) : null;
      apiKey = kept ?? (await createApiKey(db, tenantId, "npm run dev")).key;
      if (opts.keyFile && !kept) await writeKeyFile(opts.keyFile, tenantId, apiKey);
    } finally {
      await pool.end();
    }

    const upstashConf = upstash;
    const modelConf = model;
    const hostEnv = (extra: Record<string, string> = {}): Record<string, string> => ({
      DATABASE_URL: databaseUrl as string,
      UPSTASH_REDIS_REST_URL: upstashConf.url,
      UPSTASH_REDIS_REST_TOKEN: upstashConf.token,
      GATEWAY_URL: gateway.url,
      INTERNAL_SIGNING_SECRET: signingSecret,
      MODEL_BASE_URL: modelConf.baseUrl,
      MODEL_API_KEY: modelConf.apiKey,
      MODEL_NAME: modelConf.name,
      MODELS: opts.models ?? modelConf.name,
      ...(opts.modelRegistry === undefined ? {} : { MODEL_REGISTRY: opts.modelRegistry }),
      HOST_METRICS_PORT: "0",
      ...opts.hostEnv,
      ...extra,
    });
    const hosts: HostHandle[] = [];
    // Runs after every host stopped (cleanups run in reverse): the sandboxes a host left behind
    // when a test SIGKILLed it mid tool call. In production the restarted host or the janitor
    // removes them; a test's stack goes away before either gets the chance.
    const spawned = new Set<string>();
    cleanups.push(async () => {
      const left = await removeSandboxesOf(spawned);
      if (left > 0) log("stack", `removed ${left} sandbox container(s) and network(s) left by killed hosts`);
    });
    const addHost = async (extraEnv: Record<string, string> = {}) => {
      const h = await spawnHost(root, hostEnv(extraEnv), log);
      spawned.add(h.id);
      hosts.push(h);
      cleanups.push(() => h.stop());
      return h;
    };
    for (let i = 0; i < (opts.hosts ?? 1); i++) await addHost();

    const stack: Stack = {
      gatewayUrl: gateway.url,
      apiKey,
      tenantId,
      databaseUrl,
      redisUrl,
      upstash: upstashConf,
      modelUrl: modelConf.baseUrl,
      modelName: modelConf.name,
      signingSecret,
      hosts,
      mockModel,
      redis: redisService,
      addHost,
      hostEnv,
      stop: stopAll,
      describe: () => ({
        gateway_url: gateway.url,
        api_key: apiKey,
        tenant_id: tenantId,
        database_url: databaseUrl,
        redis_url: redisUrl,
        upstash_url: upstashConf.url,
        upstash_token: upstashConf.token,
        model_url: modelConf.baseUrl,
        signing_secret: signingSecret,
        hosts: hosts.map((h) => ({ id: h.id, metrics_url: h.metricsUrl, pid: h.process.pid })),
        // What `npm run host` needs to join; a real provider's key is not written to disk.
        host_env: { ...hostEnv(), MODEL_API_KEY: mockModel ? "mock" : "" },
        // The secrets the hosts were given (from this environment), by name: an added host needs them too.
        host_secrets: hostSecretsIn({ ...process.env, ...hostEnv() }).filter(
          (n) => n !== "MODEL_API_KEY" || !mockModel,
        ),
        pid: process.pid,
      }),
    };
    return stack;
  } catch (err) {
    await stopAll();
    throw err;
  }
}

export interface SpawnHostOptions {
  /** Node arguments (default: `--import tsx sandbox-host/main.ts`; chaos runs use a bundle). */
  argv?: string[];
  readyTimeoutMs?: number;
  stopGraceMs?: number;
}

/**
 * Spawn a sandbox-host in its own process group and wait for its `host.ready` line. Every log line
 * is handed to `log` whole (a chunk may end mid-line; the chaos harness counts what hosts report).
 */
export async function spawnHost(
  root: string,
  env: Record<string, string>,
  log: (source: string, line: string) => void = () => {},
  opts: SpawnHostOptions = {},
): Promise<HostHandle> {
  const argv = opts.argv ?? ["--import", "tsx", join(root, "sandbox-host", "main.ts")];
  const readyTimeoutMs = opts.readyTimeoutMs ?? 30_000;
  const child = spawn(process.execPath, argv, {
    cwd: root,
    env: { ...process.env, ...env },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  killOnExit(child, { group: true });
  const stderrTail: string[] = [];
  createInterface({ input: child.stderr as NodeJS.ReadableStream }).on("line", (line) => {
    stderrTail.push(line);
    if (stderrTail.length > 30) stderrTail.shift();
    log("host", line);
  });
  const ready = await new Promise<{ id: string; metrics_url: string }>((resolveReady, reject) => {
    const timer = setTimeout(
      () =>
        reject(new Error(`sandbox-host did not report ready in ${readyTimeoutMs / 1000} s\n${stderrTail.join("\n")}`)),
      readyTimeoutMs,
    );
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      log("host", line);
      try {
        const msg = JSON.parse(line) as { event?: string; id?: string; metrics_url?: string };
        if (msg.event === "host.ready" && msg.id && msg.metrics_url) {
          clearTimeout(timer);
          resolveReady({ id: msg.id, metrics_url: msg.metrics_url });
        }
      } catch {}
    });
    child.once("exit", (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`sandbox-host exited (${code ?? sig}) before ready\n${stderrTail.join("\n")}`));
    });
  }).catch(async (err) => {
    await stopProcessGroup(child, 1000);
    throw err;
  });
  const grace = opts.stopGraceMs ?? 15_000;
  return { id: ready.id, metricsUrl: ready.metrics_url, process: child, stop: () => stopProcessGroup(child, grace) };
}

/** The key in `file` when it is still a live key of `tenantId` in this database, else null. */
async function keptKey(db: Db, file: string, tenantId: string): Promise<string | null> {
  let saved: { tenant_id?: unknown; api_key?: unknown };
  try {
    saved = JSON.parse(await readFile(file, "utf8"));
  } catch {
    return null; // none yet (or unreadable: replaced below)
  }
  const key = saved.api_key;
  if (saved.tenant_id !== tenantId || typeof key !== "string" || !looksLikeApiKey(key)) return null;
  return (await findTenantIdByKeyHash(db, await hashApiKey(key))) === tenantId ? key : null;
}

async function writeKeyFile(file: string, tenantId: string, apiKey: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}`;
  await writeFile(tmp, `${JSON.stringify({ tenant_id: tenantId, api_key: apiKey }, null, 2)}\n`, { mode: 0o600 });
  await rename(tmp, file);
}

/** Remove every sandbox container and network labelled with one of `hostIds`; how many went. */
async function removeSandboxesOf(hostIds: ReadonlySet<string>): Promise<number> {
  if (hostIds.size === 0) return 0;
  const docker = connectDocker();
  const filters = JSON.stringify({ label: [`${LABEL_SANDBOX}=1`] });
  let containers: Awaited<ReturnType<typeof docker.listContainers>>;
  try {
    containers = await docker.listContainers({ all: true, filters });
  } catch {
    return 0; // no Docker engine: no sandboxes either
  }
  const ours = (labels: Record<string, string> | undefined) => hostIds.has(labels?.[LABEL_HOST] ?? "");
  let removed = 0;
  for (const c of containers.filter((x) => ours(x.Labels))) {
    await docker
      .getContainer(c.Id)
      .remove({ force: true })
      .then(
        () => removed++,
        () => {},
      );
  }
  const networks = await docker.listNetworks({ filters }).catch(() => []);
  for (const n of networks.filter((x) => ours(x.Labels))) {
    await docker
      .getNetwork(n.Id)
      .remove()
      .then(
        () => removed++,
        () => {},
      );
  }
  return removed;
}

async function ensureSandboxImage(log: (source: string, line: string) => void): Promise<void> {
  const docker = connectDocker();
  try {
    await docker.ping();
  } catch {
    log("sandbox", "no Docker engine: text-only jobs work; tool calls will fail with tools_unavailable");
    return;
  }
  // Built when missing or older than the recipe (tools/build/sandbox-image.ts), in well under a second.
  await buildImageIfStale({ docker, image: LOCAL_SANDBOX_IMAGE });
}

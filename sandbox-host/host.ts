/**
 * Wires one sandbox-host: Postgres pool, Redis client, metrics, outbox, runner, claimer. Takes a
 * parsed config and its collaborators (model client, logger) so tests can start several hosts in
 * one process; main.ts is the production entry that builds them from the environment.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import * as schema from "../src/db/schema";
import type { ModelCatalog } from "../src/domain/models";
import { redisKeys } from "../src/quota/keys";
import { createLeaseStore } from "../src/quota/lease-store";
import { createRedisClient, type Redis } from "../src/quota/redis";
import { Claimer } from "./claimer";
import { ReadyListener } from "./claimer/ready-listener";
import { type HostConfig, listenDatabaseUrl } from "./config";
import { createLogger, errorFields, type Logger } from "./log";
import { createHostMetrics, type HostMetrics, observeQuotaWait, type Readiness, startMetricsServer } from "./metrics";
import { QueueDepthSampler } from "./metrics/queue-depth";
import type { ModelClient } from "./model/types";
import { OffloadPool, type OffloadPoolOptions } from "./offload";
import { Outbox } from "./outbox";
import { loadQuotaScripts } from "./quota/load-scripts";
import { Reaper, SandboxJanitor } from "./reaper";
import { Runner } from "./runner";
import { connectDocker, createSandboxManager, type SandboxManager } from "./sandbox";

/** Offload work still running this long after the runs ended is stopped with its thread. */
export const OFFLOAD_DRAIN_MS = 5000;

export interface HostDeps {
  model: ModelClient;
  /** The provider's default model name, when `models` is not given (the catalog is just it). */
  modelName?: string;
  /** The models jobs may run on, the default first (main.ts: MODEL_NAME + MODELS). */
  models?: ModelCatalog;
  /** Sandboxes for tool calls; default: one built from config when Docker answers. */
  sandbox?: SandboxManager | null;
  log?: Logger;
  /** Defaults to a client built from `config.redis`. */
  redis?: Redis;
  fetch?: typeof fetch;
  /** The offload pool's size and queue bound (defaults: 2 threads, 64 queued). */
  offload?: Pick<OffloadPoolOptions, "size" | "maxQueue">;
}

export interface RunningHost {
  id: string;
  metricsUrl: string;
  healthUrl: string;
  /** 200 when the host can do its work, 503 with the reasons when not (metrics/server.ts). */
  readyUrl: string;
  /** The host's one adapter for blocking or CPU-heavy work (worker threads). */
  offload: OffloadPool;
  /** Claimed-or-running jobs right now. */
  readonly runsActive: number;
  /**
   * Graceful stop: no new claims, running jobs get `graceMs` (default: the config's) to finish,
   * the outbox gets its flush timeout, then everything is closed. Idempotent.
   */
  close(opts?: { graceMs?: number }): Promise<void>;
}

export async function startHost(config: HostConfig, deps: HostDeps): Promise<RunningHost> {
  const log = deps.log ?? createLogger({ host: config.hostId });
  // One connection per run slot (each run issues one statement at a time) plus the claimer,
  // the heartbeat and the sweep: max runs + 4 keeps a busy host from queueing on its own pool.
  const pool = new pg.Pool({
    connectionString: config.databaseUrl,
    max: config.maxRuns + 4,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: 5_000,
  });
  // An idle client losing its connection emits here; unhandled it would kill the process.
  pool.on("error", (err) => log.warn("idle Postgres connection failed", errorFields(err)));
  try {
    await pool.query("SELECT 1");
  } catch (err) {
    await pool.end().catch(() => {});
    throw new Error(`cannot reach Postgres at DATABASE_URL: ${err instanceof Error ? err.message : String(err)}`);
  }
  const db = drizzle(pool, { schema });
  const redis = deps.redis ?? createRedisClient(config.redis);

  const metrics = createHostMetrics(config.hostId);
  const leaseStore =
    config.quotaModelLimit > 0
      ? createLeaseStore(redis, await loadQuotaScripts(), {
          heartbeatIntervalMs: config.heartbeatMs,
          breaker: { onChange: (b) => metrics.quotaBreakerOpen.set(b.state === "open" ? 1 : 0) },
        })
      : null;
  const sandbox = deps.sandbox !== undefined ? deps.sandbox : await startSandboxes(config, log, metrics);
  const offload = new OffloadPool({ ...deps.offload, observer: metrics.offloadObserver });
  const outbox = new Outbox({
    gatewayUrl: config.gatewayUrl,
    signingSecret: config.signingSecret,
    log,
    fetch: deps.fetch,
    onBacklog: (n) => metrics.outboxBacklog.set(n),
  });
  const runner = new Runner({
    db,
    hostId: config.hostId,
    maxRuns: config.maxRuns,
    model: deps.model,
    outbox,
    log,
    metrics,
    heartbeatMs: config.heartbeatMs,
    cancelHintMs: config.cancelHintMs,
    cancelDurableMs: config.cancelDurableMs,
    coalesceMs: config.deltaCoalesceMs,
    redis,
    keys: redisKeys(),
    sandbox: sandbox ?? undefined,
    models: deps.models ?? { entries: [{ name: deps.modelName ?? "default" }] },
    quota: leaseStore
      ? {
          store: leaseStore,
          modelLimit: config.quotaModelLimit,
          tenantLimit: config.quotaTenantLimit,
          maxWaitMs: config.quotaMaxWaitMs,
          onWait: (outcome) => observeQuotaWait(metrics, outcome),
        }
      : undefined,
  });
  const claimer = new Claimer({
    db,
    redis,
    keys: redisKeys(),
    hostId: config.hostId,
    runner,
    log,
    metrics,
    pollMs: config.pollMs,
    idlePollMs: config.idlePollMs,
    sweepMs: config.sweepMs,
    sweepOlderThanMs: config.sweepOlderThanMs,
  });

  const reaper = new Reaper({
    db,
    redis,
    keys: redisKeys(),
    log,
    intervalMs: config.reapMs,
    claimTimeoutMs: config.claimTimeoutMs,
    runLostAfterMs: config.runLostAfterMs ?? 3 * config.heartbeatMs + 2000,
    indexRebuildMs: config.indexRebuildMs,
  });
  const janitor = sandbox ? new SandboxJanitor({ db, sandbox, log, intervalMs: config.sandboxJanitorMs }) : null;
  const listenTarget = listenDatabaseUrl(config);
  if (listenTarget.warning) log.warn(listenTarget.warning);
  const listener = listenTarget.url
    ? new ReadyListener({
        databaseUrl: listenTarget.url,
        log,
        onReady: (jobId) => claimer.hint(jobId),
        onCancel: (owner) => {
          if (owner === config.hostId) runner.wakeCancelCheck();
        },
      })
    : null;

  let stopping = false;
  const readiness = (): Readiness => {
    const reasons: string[] = [];
    if (stopping) reasons.push("shutting down: no new claims");
    const quota = leaseStore?.breaker() ?? null;
    // Open until a quota call succeeds again: the next acquire or renewal after the cooldown probes.
    if (quota?.state === "open") {
      reasons.push(
        `quota circuit breaker open: Redis calls are failing (${quota.lastError}); no model call can be admitted`,
      );
    }
    return { ready: reasons.length === 0, reasons, quota };
  };
  let server: Awaited<ReturnType<typeof startMetricsServer>>;
  try {
    server = await startMetricsServer({
      port: config.metricsPort,
      host: config.metricsHost,
      hostId: config.hostId,
      metrics,
      runsActive: () => runner.active,
      readiness,
    });
  } catch (err) {
    metrics.stop();
    await offload.close({ timeoutMs: 0 }).catch(() => {});
    await pool.end().catch(() => {});
    throw err;
  }

  runner.startHeartbeats();
  runner.startCancelWatch();
  if (leaseStore) runner.startLeaseRenewal(leaseStore);
  await listener?.start();
  claimer.start();
  reaper.start();
  janitor?.start();
  const queueDepth = new QueueDepthSampler({ db, registry: metrics.registry, intervalMs: config.queueDepthMs, log });
  queueDepth.start();
  log.info("sandbox-host started", { max_runs: config.maxRuns, metrics_url: server.url });

  let closing: Promise<void> | null = null;
  const close = async (graceMs: number) => {
    stopping = true;
    await listener?.stop();
    await claimer.stop();
    await reaper.stop();
    await janitor?.stop();
    await queueDepth.stop();
    log.info("admission stopped; waiting for running jobs", { runs: runner.active, grace_ms: graceMs });
    await runner.shutdown(graceMs);
    // Runs are over: stop admitting offload work, let what was admitted finish, end the threads.
    await offload.close({ timeoutMs: OFFLOAD_DRAIN_MS });
    await runner.stopHeartbeats();
    await runner.stopCancelWatch();
    await runner.stopLeaseRenewal();
    const delivered = await outbox.drain(config.outboxFlushTimeoutMs);
    if (!delivered) log.warn("outbox not fully delivered at shutdown", { undelivered: outbox.pendingEvents });
    outbox.close();
    metrics.stop();
    await server.close();
    await pool.end();
    log.info("sandbox-host stopped");
  };

  return {
    id: config.hostId,
    offload,
    metricsUrl: server.url,
    healthUrl: server.url.replace(/\/metrics$/, "/healthz"),
    readyUrl: server.url.replace(/\/metrics$/, "/readyz"),
    get runsActive() {
      return runner.active;
    },
    close(opts) {
      closing ??= close(opts?.graceMs ?? config.shutdownGraceMs);
      return closing;
    },
  };
}

/**
 * Sandboxes need a Docker engine. Without one the host still runs text-only jobs; a job whose
 * model calls a tool then fails with tools_unavailable (never a fallback to the host). Orphans of
 * this host id (a previous process that died) are removed before any run starts here.
 */
async function startSandboxes(config: HostConfig, log: Logger, metrics: HostMetrics): Promise<SandboxManager | null> {
  if (!config.sandboxEnabled) return null;
  const docker = connectDocker();
  try {
    await docker.ping();
  } catch (err) {
    log.warn("no Docker engine: tool calls will fail with tools_unavailable", errorFields(err));
    return null;
  }
  const manager = createSandboxManager({
    docker,
    hostId: config.hostId,
    image: config.sandboxImage,
    logger: log,
    observe: {
      active: (n) => metrics.sandboxesActive.set(n),
      created: (seconds, outcome) => metrics.sandboxCreate.observe({ outcome }, seconds),
      deleted: (seconds, outcome) => metrics.sandboxDelete.observe({ outcome }, seconds),
    },
  });
  try {
    await manager.removeOrphans(new Set());
  } catch (err) {
    log.warn("orphan sandbox removal failed", errorFields(err));
  }
  return manager;
}

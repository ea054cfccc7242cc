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
import { createLeaseStore, type LeaseStore } from "../src/quota/lease-store";
import { createRedisClient, type Redis } from "../src/quota/redis";
import { Claimer } from "./claimer";
import { ReadyListener } from "./claimer/ready-listener";
import type { HostConfig } from "./config";
import { type Service, type StartedServices, startInOrder } from "./lifecycle";
import { createLogger, errorFields, type Logger } from "./log";
import { createHostMetrics, type HostMetrics, observeQuotaWait, type Readiness, startMetricsServer } from "./metrics";
import type { ModelClient } from "./model/types";
import { OffloadPool, type OffloadPoolOptions } from "./offload";
import { Outbox } from "./outbox";
import { loadQuotaScripts } from "./quota/load-scripts";
import { Reaper, SandboxJanitor } from "./reaper";
import { Runner } from "./runner";
import { connectDocker, createSandboxManager, type SandboxManager } from "./sandbox";

/** Offload work still running this long after the runs ended is stopped with its thread. */
const OFFLOAD_DRAIN_MS = 5000;

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
  const pool = await connectPostgres(config, log);
  let parts: HostParts;
  try {
    parts = await buildParts(config, deps, log, pool);
  } catch (err) {
    await pool.end().catch(() => {});
    throw err;
  }
  const { runner, outbox, offload, metrics } = parts;

  let stopping = false;
  let server: MetricsServer | undefined;
  let graceMs = config.shutdownGraceMs;
  const services: Service[] = [
    // Stopped last: every other part writes through the pool until it has stopped.
    { name: "postgres pool", stop: () => pool.end() },
    // Up before any work starts (the dev orchestrator and the probes wait on it); closed after
    // the outbox so /metrics shows the final backlog and runs while the shutdown drains.
    {
      name: "metrics server",
      start: async () => {
        server = await startMetricsServer({
          port: config.metricsPort,
          hostId: config.hostId,
          metrics,
          runsActive: () => runner.active,
          readiness: () => readiness(stopping, parts.leaseStore),
        });
      },
      stop: () => server?.close(),
    },
    // The event-loop lag probe; nothing more is measured once the outbox is done.
    { name: "metrics probe", stop: () => metrics.stop() },
    // After the loops below: the runs' last events (their terminals included) are queued by
    // then, so this drain is the final one. Bounded by HOST_OUTBOX_FLUSH_TIMEOUT_MS.
    {
      name: "outbox",
      stop: async () => {
        const delivered = await outbox.drain(config.outboxFlushTimeoutMs);
        if (!delivered) log.warn("outbox not fully delivered at shutdown", { undelivered: outbox.pendingEvents });
        outbox.close();
      },
    },
    // The per-run loops outlive the runs: a run still finishing keeps its heartbeat (or the
    // reaper would call it lost), its cancel watch and its quota lease until it has ended.
    ...(parts.leaseStore ? [runner.leaseRenewal(parts.leaseStore)] : []),
    runner.cancelWatch,
    runner.heartbeats,
    // Stopped once the runs are over: admitted offload work finishes (bounded), then the threads end.
    { name: "offload pool", stop: () => offload.close({ timeoutMs: OFFLOAD_DRAIN_MS }) },
    // Stopped after admission: running jobs get the grace period (HOST_SHUTDOWN_GRACE_MS), then
    // are aborted and end failed with host_shutdown.
    {
      name: "runs",
      stop: async () => {
        log.info("admission stopped; waiting for running jobs", { runs: runner.active, grace_ms: graceMs });
        await runner.shutdown(graceMs);
      },
    },
    // Recovery loops: stopped with admission, before the wait for runs (they start no run here).
    ...(parts.janitor ? [parts.janitor] : []),
    parts.reaper,
    // Admission: the claimer, then what wakes it. Stopped first, so no claim starts during the shutdown.
    { name: "claimer", start: () => parts.claimer.start(), stop: () => parts.claimer.stop() },
    ...(parts.listener
      ? [{ name: "ready listener", start: () => parts.listener?.start(), stop: () => parts.listener?.stop() }]
      : []),
    // The first step of a shutdown: /readyz says "shutting down" from here on.
    {
      name: "readiness",
      stop: () => {
        stopping = true;
      },
    },
  ];
  let started: StartedServices;
  try {
    started = await startInOrder(services, log);
  } catch (err) {
    // startInOrder stopped what it had started (the pool among them); the parts registered
    // after the failed step exist from construction and end here, without waiting.
    metrics.stop();
    outbox.close();
    await offload.close({ timeoutMs: 0 }).catch(() => {});
    throw err;
  }
  const url = (server as MetricsServer).url;
  log.info("sandbox-host started", { max_runs: config.maxRuns, metrics_url: url });

  let closing: Promise<void> | null = null;
  return {
    id: config.hostId,
    offload,
    metricsUrl: url,
    healthUrl: url.replace(/\/metrics$/, "/healthz"),
    readyUrl: url.replace(/\/metrics$/, "/readyz"),
    get runsActive() {
      return runner.active;
    },
    close(opts) {
      closing ??= (async () => {
        graceMs = opts?.graceMs ?? config.shutdownGraceMs;
        await started.stop();
        log.info("sandbox-host stopped");
      })();
      return closing;
    },
  };
}

type MetricsServer = Awaited<ReturnType<typeof startMetricsServer>>;

/** Everything a host is made of, built before any of it starts. */
interface HostParts {
  metrics: HostMetrics;
  leaseStore: LeaseStore | null;
  offload: OffloadPool;
  outbox: Outbox;
  runner: Runner;
  claimer: Claimer;
  reaper: Reaper;
  janitor: SandboxJanitor | null;
  listener: ReadyListener | null;
}

async function connectPostgres(config: HostConfig, log: Logger): Promise<pg.Pool> {
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
  return pool;
}

async function buildParts(config: HostConfig, deps: HostDeps, log: Logger, pool: pg.Pool): Promise<HostParts> {
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
  const listener = config.listen
    ? new ReadyListener({
        databaseUrl: config.databaseUrl,
        log,
        onReady: (jobId) => claimer.hint(jobId),
        onCancel: (owner) => {
          if (owner === config.hostId) runner.wakeCancelCheck();
        },
      })
    : null;
  return { metrics, leaseStore, offload, outbox, runner, claimer, reaper, janitor, listener };
}

function readiness(stopping: boolean, leaseStore: LeaseStore | null): Readiness {
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

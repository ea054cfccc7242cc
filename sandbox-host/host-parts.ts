/**
 * What a host is made of, built before any of it starts (host.ts decides the start and stop
 * order): the Postgres pool, the Redis client, metrics, the quota lease store, sandboxes, the
 * offload pool, the outbox, the runner, the claimer, the upkeep duties (the reaper, expiry,
 * the index rebuild, retention), the janitor, the listener.
 */

import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { Counter, Gauge } from "prom-client";
import {
  CODE_TOOLS_REFRESH_MS,
  publishCodeTools,
  refreshCodeTools,
  unpublishCodeTools,
} from "../src/db/code-tools-repo";
import { isPoolerUrl } from "../src/db/pooler-url";
import * as schema from "../src/db/schema";
import type { ModelCatalog } from "../src/domain/models";
import { defaultRunLostAfterMs } from "../src/domain/recovery";
import { redisKeys } from "../src/quota/keys";
import { createLeaseStore, type LeaseStore } from "../src/quota/lease-store";
import { createRedisClient, type Redis } from "../src/quota/redis";
import { createBlobClient } from "./artifacts/blob-client";
import { Claimer } from "./claimer/claimer";
import { ReadyListener } from "./claimer/ready-listener";
import { CodeTools } from "./code-tools/code-tool-pool";
import type { CodeToolSpec } from "./code-tools/tool-modules";
import { EvalScorer } from "./evals/eval-scorer";
import { defaultPgPoolMax, type HostConfig, listenDatabaseUrl, reservedSlotsOf } from "./host-config";
import { FleetActivity } from "./lifecycle/activity";
import { HeldRunsWatch, holdRunsLock, OwnersWatch } from "./lifecycle/held-watch";
import { PeriodicTask } from "./lifecycle/periodic";
import type { Service } from "./lifecycle/service";
import { FleetSleep, type WakeReason } from "./lifecycle/sleep";
import { errorFields, type Logger } from "./log";
import type { McpHostConfig } from "./mcp/mcp-config";
import { createHostMetrics, type HostMetrics, observeQuotaWait } from "./metrics/metrics";
import { QueueDepthSampler } from "./metrics/queue-depth";
import type { ModelClient } from "./model/types";
import { OffloadPool, type OffloadPoolOptions } from "./offload/pool";
import { Outbox } from "./outbox/outbox";
import { nameLifecycleStatements } from "./prepared-statements";
import { loadQuotaScripts } from "./quota/load-scripts";
import { ExpirySweep } from "./reaper/expiry";
import { IndexRebuild } from "./reaper/index-rebuild";
import { Reaper } from "./reaper/reaper";
import { RetentionPurge } from "./reaper/retention";
import { SandboxJanitor } from "./reaper/sandbox-janitor";
import { Runner } from "./runner/runner";
import { connectDocker } from "./sandbox/docker";
import { createSandboxManager, type SandboxManager } from "./sandbox/manager";
import { ScheduleTicker } from "./scheduler/schedule-ticker";
import type { HostTracing } from "./tracing/tracing";
import { registerWebhookMetrics, WebhookSender } from "./webhooks/webhook-sender";

/**
 * What a host is given besides its config (host.ts `startHost`): the collaborators tests replace.
 * Declared here, beside the one function that builds the parts from them.
 */
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
  /** MCP's allowed URLs and secrets (main.ts: MCP_ALLOWED_URLS, MCP_SECRETS[_FILE]); default: MCP off. */
  mcp?: McpHostConfig;
  /** The code tools HOST_TOOLS loaded (main.ts, code-tools/tool-modules.ts); default: none. */
  codeTools?: { modules: readonly string[]; specs: readonly CodeToolSpec[] };
  /** The offload pool's size and queue bound (defaults: 2 threads, 64 queued). */
  offload?: Pick<OffloadPoolOptions, "size" | "maxQueue">;
  /** OpenTelemetry (main.ts: startTracing from the OTEL_* variables); default: off. */
  tracing?: HostTracing;
}

/** Everything a host is made of, built before any of it starts. */
export interface HostParts {
  metrics: HostMetrics;
  leaseStore: LeaseStore | null;
  offload: OffloadPool;
  /** The host's code tools (HOST_TOOLS), null when it has none. */
  codeTools: CodeTools | null;
  /** Publishes this host's code tools in the catalog at start (none: clears its old entries), removes them at stop. */
  toolCatalog: Service;
  outbox: Outbox;
  runner: Runner;
  claimer: Claimer;
  /** The host's upkeep, one service per duty, named like the Worker's cron backstops (workers/cron/). */
  reaper: Reaper;
  expiry: ExpirySweep;
  indexRebuild: IndexRebuild;
  /** Purges finished jobs past their retention (null: HOST_PURGE_MS=0). */
  retention: RetentionPurge | null;
  /** Fires schedule ticks (null: HOST_SCHEDULE_MS=0). */
  scheduler: ScheduleTicker | null;
  /** Scores eval cases whose job ended (evals/eval-scorer.ts). */
  evalScorer: EvalScorer;
  /** Sends webhook deliveries (null: HOST_WEBHOOK_POLL_MS=0). */
  webhooks: WebhookSender | null;
  janitor: SandboxJanitor | null;
  listener: ReadyListener | null;
  /** The autoscaling signal: queued jobs and the oldest one's age, per tenant (HOST_QUEUE_DEPTH_MS). */
  queueDepth: QueueDepthSampler;
  /** Whether the fleet is idle as this host knows it: the loops' idle cadence (HOST_IDLE_MS). */
  activity: FleetActivity;
  /** Sleeps an idle host without Postgres traffic until woken or due (null: HOST_SLEEP_MAX_MS=0 or no LISTEN). */
  sleep: FleetSleep | null;
}

/**
 * A pool to the host's DATABASE_URL, as both of the host's pools are made: idle connections
 * closed after 30 s, a lost idle connection logged as news, the lifecycle statements named.
 */
function hostPool(
  config: HostConfig,
  log: Logger,
  what: string,
  size: { max: number; min?: number; idleTimeoutMillis?: number },
): pg.Pool {
  const pool = new pg.Pool({
    connectionString: config.databaseUrl,
    idleTimeoutMillis: 30_000,
    ...size,
    // pg-pool bounds both a new connection's start and a statement's wait for a busy pool with
    // this: the second is a queue under a burst (1,000 runs starting at once), not a failure. A
    // Postgres that is down still answers at once (connection refused).
    connectionTimeoutMillis: 60_000,
  });
  // An idle client losing its connection emits here; unhandled it would kill the process. A
  // suspended Neon compute closes idle connections: the pool drops the client and opens a new one
  // at the next statement, never before, so this is news, not a failure.
  pool.on("error", (err) =>
    log.info(`idle ${what} connection closed; the next statement opens a new one`, errorFields(err)),
  );
  if (!isPoolerUrl(config.databaseUrl)) nameLifecycleStatements(pool);
  return pool;
}

export async function connectPostgres(config: HostConfig, log: Logger): Promise<pg.Pool> {
  // Up to one connection per run slot plus the claimer, the heartbeat and the sweep, bounded
  // (defaultPgPoolMax, HOST_PG_POOL_MAX). One connection stays open when unused: an idle host
  // sends a statement a minute at most, so without it the first claim after a quiet spell would
  // wait for a new connection on top of the claim (measured here: 26 ms for connect + SCRAM
  // authentication + a query, 0.7 ms for the query on an open connection; TLS adds more on
  // Neon). An open connection costs no statement.
  const pool = hostPool(config, log, "Postgres", { max: config.pgPoolMax ?? defaultPgPoolMax(config.maxRuns), min: 1 });
  try {
    await pool.query("SELECT 1");
  } catch (err) {
    await pool.end().catch(() => {});
    throw new Error(`cannot reach Postgres at DATABASE_URL: ${err instanceof Error ? err.message : String(err)}`);
  }
  return pool;
}

/**
 * The ownership lease's own connections, apart from the pool the runs share: the heartbeat and
 * the started CAS (which starts a run's lease). Under 1,000 runs at once the runs' statements
 * queued for the bounded pool and the heartbeat waited behind them, past the lost bound: 20 runs
 * self-fenced and were recovered elsewhere though their host was alive. The started CAS queued
 * there too: its lease counts from when it was sent, so a start that waited ~4 s for the pool
 * left its first heartbeat ~3.5 s of the 7.5 s fence to land in, and under that step's load it
 * did not (20 more self-fences, the same count one step later). Two connections: one heartbeat
 * and one start batch are in flight at most (each is one statement at a time), so neither waits
 * for the other. Opened when due, closed when unused for half the lost bound (an idle host has
 * no runs: no session): each of these sessions has the lost bound as its idle_session_timeout
 * (lifecycle/held-watch.ts), and a pool that closes an idle one first never hands out one that
 * Postgres is ending at that moment (a start batch would fail with it).
 */
export function heartbeatPool(config: HostConfig, log: Logger): pg.Pool {
  const lost = config.runLostAfterMs ?? defaultRunLostAfterMs(config.heartbeatMs);
  return hostPool(config, log, "heartbeat", { max: 2, idleTimeoutMillis: Math.min(30_000, Math.floor(lost / 2)) });
}

export async function buildParts(
  config: HostConfig,
  deps: HostDeps,
  log: Logger,
  pool: pg.Pool,
  beats: pg.Pool = pool,
): Promise<HostParts> {
  const db = drizzle(pool, { schema });
  const redis = deps.redis ?? createRedisClient(config.redis);
  const metrics = createHostMetrics(config.hostId);
  const models = deps.models ?? { entries: [{ name: deps.modelName ?? "default" }] };
  // A registry entry's own `concurrency` turns the quota on for it even when QUOTA_MODEL_LIMIT is 0.
  const leaseStore =
    config.quotaModelLimit > 0 || models.entries.some((e) => (e.concurrency ?? 0) > 0)
      ? createLeaseStore(redis, await loadQuotaScripts(), {
          heartbeatIntervalMs: config.heartbeatMs,
          breaker: { onChange: (b) => metrics.quotaBreakerOpen.set(b.state === "open" ? 1 : 0) },
        })
      : null;
  const started = deps.sandbox !== undefined ? null : await startSandboxes(config, log, metrics);
  const sandbox = deps.sandbox !== undefined ? deps.sandbox : (started?.manager ?? null);
  if (sandbox) metrics.watchSandboxCreateQueue(() => sandbox.creationLoad().queued);
  const offload = new OffloadPool({ ...deps.offload, observer: metrics.offloadObserver });
  const codeTools =
    deps.codeTools && deps.codeTools.specs.length > 0
      ? new CodeTools({
          modules: deps.codeTools.modules,
          specs: deps.codeTools.specs,
          concurrency: config.toolConcurrency,
          memoryMb: config.toolMemoryMb,
          log,
        })
      : null;
  const outbox = new Outbox({
    gatewayUrl: config.gatewayUrl,
    signingSecret: config.signingSecret,
    log,
    fetch: deps.fetch,
    onBacklog: (n) => metrics.outboxBacklog.set(n),
  });
  // One bound for the reaper (when to call a run lost) and the runner (when a run stops itself first).
  const runLostAfterMs = config.runLostAfterMs ?? defaultRunLostAfterMs(config.heartbeatMs);
  // The owner's half of the held-run watch: its heartbeat session holds the lock while it lives
  // and heartbeats. Only on a session of its own to a direct URL (a pooler keeps no session).
  if (beats !== pool && !isPoolerUrl(config.databaseUrl)) {
    holdRunsLock(beats, { lostAfterMs: runLostAfterMs, log, hostId: config.hostId });
  }
  const runner = new Runner({
    db,
    heartbeatDb: beats === pool ? db : drizzle(beats, { schema }),
    maxRuns: config.maxRuns,
    model: deps.model,
    outbox,
    log,
    metrics,
    heartbeatMs: config.heartbeatMs,
    runLostAfterMs,
    cancelHintMs: config.cancelHintMs,
    cancelDurableMs: config.cancelDurableMs,
    // Read only once runs exist, after every part is built (the activity is declared below).
    cancelIdle: { everyMs: Math.max(config.idleMs, 1000), when: () => activity.idle },
    coalesceMs: config.deltaCoalesceMs,
    redis,
    keys: redisKeys(),
    sandbox: sandbox ?? undefined,
    artifacts: {
      store: createBlobClient({
        gatewayUrl: config.gatewayUrl,
        signingSecret: config.signingSecret,
        fetch: deps.fetch,
      }),
      maxBytes: config.artifactMaxBytes,
      snapshotMaxBytes: config.snapshotMaxBytes,
      tenantCapBytes: config.tenantStorageMaxBytes,
    },
    // Called only by runs, which start after every part is built (the janitor is declared below).
    fenceOwed: (run) => janitor?.settle([run]),
    sandboxQueueLimit: config.sandboxCreateQueue,
    maxQueuedJobsPerTenant: config.maxQueuedJobsPerTenant,
    offload,
    codeTools: codeTools ?? undefined,
    models,
    mcp: deps.mcp,
    ...(deps.tracing ? { tracing: deps.tracing } : {}),
    defaultMaxOutputTokens: config.modelMaxOutputTokens,
    retry: {
      maxRetries: config.modelRetryMax,
      baseMs: config.modelRetryBaseMs,
      maxDelayMs: config.modelRetryMaxDelayMs,
      budgetMs: config.modelRetryBudgetMs,
    },
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
  // The listener is built below (it needs the claimer); the activity only reads it later.
  let listener: ReadyListener | null = null;
  // Built below with the sleep; the activity only reads it later.
  let heldWatch: HeldRunsWatch | null = null;
  // LISTEN needs a session of its own: a Neon pooler URL cannot hold one (host-config.ts decides).
  const listenTarget = listenDatabaseUrl(config);
  if (listenTarget.warning) log.warn(listenTarget.warning);
  // A host quiet over its runs while other hosts hold runs too watches those owners, each from a
  // session of its own on the LISTEN URL (a direct one, as the waits on a lock need).
  const ownersWatch =
    listenTarget.url && config.idleMs > 0
      ? new OwnersWatch({
          databaseUrl: listenTarget.url,
          log,
          onReleased: (owner) => {
            log.info("other owner gone: busy", { owner });
            activity.noteWork();
          },
        })
      : undefined;
  const activity = new FleetActivity({
    idleMs: config.idleMs,
    localRuns: () => runner.active,
    listening: () => listener?.connected === true,
    watchesHeld: () => heldWatch !== null,
    ownLockMs: runLostAfterMs + 1000,
    ownersWatch,
  });
  runner.onSlotFreed(() => activity.localRunEnded());
  activity.onWork(() => runner.hurryCancelWatch());
  // When this host last sent Postgres anything (a pool checkout is one statement or one
  // transaction; the listener's LISTEN at each connect): a sleeping host's stays put.
  let lastStatementAt = Date.now();
  const touchedPostgres = () => {
    lastStatementAt = Date.now();
  };
  pool.on("acquire", touchedPostgres);
  if (beats !== pool) beats.on("acquire", touchedPostgres);
  new Gauge({
    name: "host_postgres_last_statement_timestamp_seconds",
    help: "When this host last sent Postgres a statement (pool checkout or LISTEN), Unix seconds: a sleeping host's does not move",
    registers: [metrics.registry],
    collect() {
      this.set(lastStatementAt / 1000);
    },
  });
  const sessions = new Counter({
    name: "host_postgres_connections_opened_total",
    help: "Postgres sessions this host's pool opened (the LISTEN session not included): none while asleep",
    registers: [metrics.registry],
  });
  pool.on("connect", () => sessions.inc());
  if (beats !== pool) beats.on("connect", () => sessions.inc());
  const fleetAsleep = new Gauge({
    name: "host_fleet_asleep",
    help: "1 while this host sleeps (idle, nothing due before its known deadline): no Postgres statement or LISTEN session, woken through Redis",
    registers: [metrics.registry],
  });
  new Gauge({
    name: "host_fleet_idle",
    help: "1 while this host calls the fleet idle (LISTEN up, and its last look found nothing waiting, claimed or running, or only this host's own runs): its loops then run every HOST_IDLE_MS",
    registers: [metrics.registry],
    collect() {
      this.set(activity.idle ? 1 : 0);
    },
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
    activity,
    reservedSlots: reservedSlotsOf(config),
  });
  const reaper = new Reaper({
    db,
    redis,
    keys: redisKeys(),
    log,
    intervalMs: config.reapMs,
    claimTimeoutMs: config.claimTimeoutMs,
    runLostAfterMs,
    activity,
    hostId: config.hostId,
    retentionMs: config.purgeMs > 0 ? config.jobRetentionS * 1000 : undefined,
  });
  const expiry = new ExpirySweep({ db, log, intervalMs: config.reapMs, activity });
  const indexRebuild = new IndexRebuild({
    db,
    redis,
    keys: redisKeys(),
    log,
    checkMs: config.reapMs,
    rebuildMs: config.indexRebuildMs,
    activity,
  });
  const retention =
    config.purgeMs > 0
      ? new RetentionPurge({ db, log, purgeMs: config.purgeMs, jobRetentionMs: config.jobRetentionS * 1000, activity })
      : null;
  const scheduler =
    config.scheduleMs > 0
      ? new ScheduleTicker({
          db,
          log,
          maxWaitMs: config.scheduleMs,
          activity,
          admission: { models, maxQueued: config.maxQueuedJobsPerTenant },
        })
      : null;
  const evalScorer = new EvalScorer({
    db,
    log,
    offload,
    activity,
    admission: { models, maxQueued: config.maxQueuedJobsPerTenant },
  });
  const webhooks =
    config.webhookPollMs > 0
      ? new WebhookSender({
          db,
          log,
          allowedUrls: config.webhookAllowedUrls,
          concurrency: config.webhookConcurrency,
          pollMs: config.webhookPollMs,
          attemptTimeoutMs: config.webhookTimeoutMs,
          activity,
        })
      : null;
  if (webhooks) registerWebhookMetrics(metrics.registry, db, log, () => activity.asleep);
  const janitor = sandbox
    ? new SandboxJanitor({ db, sandbox, log, intervalMs: config.sandboxJanitorMs, activity })
    : null;
  // The sandboxes the previous process left are gone now; their runs' fences are cleared by the
  // janitor once the reaper has declared those runs over (nothing else would: no listing finds them).
  janitor?.settle(started?.orphanRuns ?? []);
  listener = listenTarget.url
    ? new ReadyListener({
        databaseUrl: listenTarget.url,
        log,
        onReady: (jobId) => {
          activity.noteWork();
          claimer.hint(jobId);
        },
        onCancel: (owner) => {
          if (owner === config.hostId) runner.wakeCancelCheck();
        },
        // News too: a sleeping host's ticker and sender skip their passes until it is awake.
        onWebhook: webhooks
          ? () => {
              activity.noteWork();
              webhooks.wake();
            }
          : undefined,
        onSchedule: scheduler
          ? () => {
              activity.noteWork();
              scheduler.wake();
            }
          : undefined,
        onConnected: () => {
          touchedPostgres();
          activity.noteWork();
        },
        onDisconnected: () => activity.noteWork(),
      })
    : null;
  // Asleep, nothing fires a schedule or sends a webhook. Woken at the deadline the look read (a
  // tick, an attempt), they look at once. Woken by a poke or a NOTIFY (mostly a job: the claim is
  // what the wake-up is for), a second later: at once, their passes opened sessions of their own
  // alongside the claim's after a suspend, and a 5-minute bench at load 15 measured 1055 ms
  // enqueue→started. A poke for a changed schedule fires its tick that second later.
  const wakeTimedLoops = () => {
    scheduler?.wake();
    webhooks?.wake();
  };
  const onAwake = (reason: WakeReason) => {
    if (reason === "deadline" || reason === "wait failed") wakeTimedLoops();
    else if (reason !== "stop") setTimeout(wakeTimedLoops, 1000).unref();
  };
  // Sleeping over runs held elsewhere needs the owners' liveness from a session of our own
  // (lifecycle/held-watch.ts); on the same direct URL as LISTEN.
  heldWatch =
    listener && listenTarget.url && config.sleepMaxMs > 0 && config.idleMs > 0
      ? new HeldRunsWatch({ databaseUrl: listenTarget.url, log })
      : null;
  const sleep =
    listener && config.sleepMaxMs > 0 && config.idleMs > 0
      ? new FleetSleep({
          hostId: config.hostId,
          activity,
          redis,
          keys: redisKeys(),
          rest: config.redis,
          listener,
          maxSleepMs: config.sleepMaxMs,
          wakePollMs: config.wakePollMs,
          log,
          onChange: (asleep) => fleetAsleep.set(asleep ? 1 : 0),
          onAwake,
          heldWatch,
          // No catalog refresh while asleep: the rows are dated to the sleep's end instead, so the
          // gateway keeps listing this host's tools (GET /v1/tools, agents naming them).
          beforeSleep:
            (deps.codeTools?.specs.length ?? 0) > 0
              ? (untilMs) => refreshCodeTools(db, config.hostId, new Date(untilMs))
              : undefined,
        })
      : null;
  const queueDepth = new QueueDepthSampler({
    db,
    registry: metrics.registry,
    intervalMs: config.queueDepthMs,
    log,
    activity,
  });
  const specs = deps.codeTools?.specs ?? [];
  // Only a host with tools refreshes them: one without adds no statement to an idle host's few.
  const refresh =
    specs.length > 0
      ? new PeriodicTask(
          {
            name: "code tool catalog refresh",
            everyMs: CODE_TOOLS_REFRESH_MS,
            spread: 0.1,
            onError: (err) => log.warn("code tool catalog refresh failed", errorFields(err)),
          },
          // Asleep: no statement (lifecycle/sleep.ts); the first refresh after the wake-up renews the entries.
          () => (activity.asleep ? Promise.resolve() : refreshCodeTools(db, config.hostId)),
        )
      : null;
  const toolCatalog: Service = {
    name: "code tool catalog",
    start: async () => {
      await publishCodeTools(db, config.hostId, specs);
      refresh?.start();
    },
    stop: async () => {
      await refresh?.stop();
      await unpublishCodeTools(db, config.hostId).catch((err: unknown) =>
        log.warn("code tools not removed from the catalog", errorFields(err)),
      );
    },
  };
  return {
    metrics,
    leaseStore,
    offload,
    codeTools,
    toolCatalog,
    outbox,
    runner,
    claimer,
    reaper,
    expiry,
    indexRebuild,
    retention,
    scheduler,
    evalScorer,
    webhooks,
    janitor,
    listener,
    queueDepth,
    activity,
    sleep,
  };
}

/**
 * Sandboxes need a Docker engine. Without one the host still runs text-only jobs; a job whose
 * model calls a tool then fails with tools_unavailable (never a fallback to the host). Orphans of
 * this host id (a previous process that died) are removed before any run starts here.
 */
async function startSandboxes(
  config: HostConfig,
  log: Logger,
  metrics: HostMetrics,
): Promise<{ manager: SandboxManager; orphanRuns: string[] } | null> {
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
    createConcurrency: config.sandboxCreateConcurrency,
    logger: log,
    observe: {
      active: (n) => metrics.sandboxesActive.set(n),
      created: (seconds, outcome) => metrics.sandboxCreate.observe({ outcome }, seconds),
      deleted: (seconds, outcome) => metrics.sandboxDelete.observe({ outcome }, seconds),
    },
  });
  let orphanRuns: string[] = [];
  try {
    orphanRuns = (await manager.removeOrphans(new Set())).runs;
  } catch (err) {
    log.warn("orphan sandbox removal failed", errorFields(err));
  }
  return { manager, orphanRuns };
}

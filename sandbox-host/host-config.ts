/**
 * The host's configuration, parsed once at the edge of the process (main.ts passes in its env)
 * and passed down as a plain object. Every knob has a default except the addresses and secrets a
 * host cannot guess; a missing or bad value stops the process with a message naming the variable.
 */
import { hostname } from "node:os";
import { z } from "zod";
import { AGENT_LIMITS } from "../src/contracts/agent";
import { LIMIT_DEFAULTS } from "../src/contracts/limits";
import { WEBHOOK_LIMITS } from "../src/contracts/webhook";
import { isPoolerUrl } from "../src/db/pooler-url";
import { JOB_RETENTION_DEFAULT_S } from "../src/db/retention-repo";
import { parseAllowedUrls } from "../src/domain/mcp";
import { DEFAULT_CLAIM_TIMEOUT_MS, DEFAULT_HEARTBEAT_MS } from "../src/domain/recovery";
import { ARTIFACT_MAX_BYTES_DEFAULT, TENANT_STORAGE_MAX_BYTES_DEFAULT } from "./artifacts/blob-client";
import { DEFAULT_CREATE_CONCURRENCY } from "./sandbox/manager";

const intFromEnv = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

const url = (protocols: string[], example: string) =>
  z
    .string()
    .min(1)
    .refine(
      (v) => {
        try {
          return protocols.includes(new URL(v).protocol);
        } catch {
          return false;
        }
      },
      `must be a ${protocols.join(" or ")} URL, e.g. ${example}`,
    );

export const HostConfigSchema = z.object({
  hostId: z
    .string()
    .min(1)
    .max(200)
    .regex(/^[A-Za-z0-9._:-]+$/, "may contain only letters, digits and . _ : -"),
  databaseUrl: url(["postgres:", "postgresql:"], "postgres://user:pass@127.0.0.1:5432/db"),
  /**
   * A direct (unpooled) URL for the LISTEN connection. A transaction-mode pooler (Neon's
   * `-pooler.` endpoints, PgBouncer) hands each transaction to any server connection, so a
   * LISTEN there is never delivered; the pool's statements are fine through it.
   */
  databaseDirectUrl: url(["postgres:", "postgresql:"], "postgres://user:pass@127.0.0.1:5432/db").optional(),
  redis: z.object({
    url: url(["http:", "https:"], "http://127.0.0.1:8079"),
    token: z.string().min(1),
  }),
  gatewayUrl: url(["http:", "https:"], "http://127.0.0.1:8787"),
  signingSecret: z.string().min(16, "must be at least 16 characters"),
  /** Run slots: the claimer never holds more claimed-or-running jobs than this. */
  maxRuns: intFromEnv(1, 256).default(8),
  /**
   * Run slots kept for newcomers: a tenant holding no job anywhere in the fleet takes its first
   * job in them; no other job does. Without them, a tenant whose long jobs filled the fleet makes
   * a newcomer wait until one ends (the claim decides only when a slot frees). Default
   * `defaultReservedSlots(maxRuns)`: 1 slot in 8; fewer than HOST_MAX_RUNS.
   */
  reservedSlots: intFromEnv(0, 255).optional(),
  /**
   * The host's Postgres pool: at most this many connections (default `defaultPgPoolMax(maxRuns)`).
   * A run issues one statement at a time and spends most of its life waiting on the model, so
   * a busy host's runs share far fewer connections than they have slots.
   */
  pgPoolMax: intFromEnv(2, 1000).optional(),
  /** 0 = any free port. */
  metricsPort: intFromEnv(0, 65535).default(0),
  /**
   * The metrics listener's address. Loopback by default: /metrics, /healthz and /readyz carry no
   * secrets but need no audience beyond the machine. A pod sets 0.0.0.0 so the kubelet's probes
   * and Prometheus reach it on the pod IP.
   */
  metricsHost: z.string().min(1).default("127.0.0.1"),
  /**
   * How often the host samples the queue depth for the autoscaling gauges (0 = never). Every
   * host samples the same global numbers; the statement's cost and why 15 s are in
   * sandbox-host/metrics/queue-depth.ts.
   */
  queueDepthMs: intFromEnv(0, 3_600_000)
    .refine((v) => v === 0 || v >= 1000, "must be 0 (off) or at least 1000 ms")
    .default(15_000),
  /** Ready-index poll interval while there is work around (see claimer/claimer.ts for the numbers). */
  pollMs: intFromEnv(1, 60_000).default(25),
  /** Poll interval once the index has been empty for a while. */
  idlePollMs: intFromEnv(1, 60_000).default(250),
  /**
   * The period of an idle host's loops (0 = never idle: the busy cadences always). Idle: no run
   * here, LISTEN up, and the last look found nothing waiting, claimed or running anywhere
   * (sandbox-host/lifecycle/activity.ts). It bounds how late a job whose announcement was lost
   * is seen. 60 s: an idle host then sends ~2 statements a minute and no Redis command.
   */
  idleMs: intFromEnv(0, 3_600_000)
    .refine((v) => v === 0 || v >= 1000, "must be 0 (never idle) or at least 1000 ms")
    .default(60_000),
  /**
   * HOST_SLEEP_MAX_MS: the longest an idle host sleeps without a Postgres statement or connection
   * (sandbox-host/lifecycle/sleep.ts), between its look and the next known deadline; it is woken
   * at once through Redis (HOST_WAKE_POLL_MS). 0 = never sleep: the HOST_IDLE_MS look a minute,
   * over a held LISTEN connection, as before. It bounds how late a job is seen whose Redis
   * wake-up was lost (the submit's Redis write failed while the host's wait did not).
   */
  sleepMaxMs: intFromEnv(0, 86_400_000)
    .refine((v) => v === 0 || v >= 1000, "must be 0 (never sleep) or at least 1000 ms")
    .default(3_600_000),
  /**
   * HOST_WAKE_POLL_MS: a sleeping host's blocking wait on Redis (BLPOP) lasts this long, so it
   * sends one Redis command per this period while asleep (60 s: one a minute; the REST wait
   * cannot be longer).
   */
  wakePollMs: intFromEnv(100, 60_000).default(60_000),
  /** Postgres sweep for jobs whose index entry was lost. */
  sweepMs: intFromEnv(50, 600_000).default(1500),
  sweepOlderThanMs: intFromEnv(0, 600_000).default(2000),
  heartbeatMs: intFromEnv(100, 600_000).default(DEFAULT_HEARTBEAT_MS),
  /** On SIGTERM: how long running jobs may take to finish before they are failed. */
  shutdownGraceMs: intFromEnv(0, 3_600_000).default(30_000),
  /** Reaper pass interval (jittered ±30 %); the expiry sweep and the ready-index marker check keep the same pace. */
  reapMs: intFromEnv(100, 600_000).default(2000),
  /**
   * The schedule ticker's longest sleep (0 = this host fires no schedule ticks). It sleeps until
   * the soonest tick it knows of; this bounds how late a tick of a schedule created or changed
   * meanwhile is seen, at the cost of one indexed statement per period.
   */
  scheduleMs: intFromEnv(0, 600_000)
    .refine((v) => v === 0 || v >= 50, "must be 0 (off) or at least 50 ms")
    .default(1000),
  /**
   * The URL prefixes webhook deliveries may go to (the gateway's own list, WEBHOOK_ALLOWED_URLS);
   * a delivery to a URL outside it fails without a request. Unset or empty: none.
   */
  webhookAllowedUrls: z
    .string()
    .optional()
    .transform((raw, ctx) => {
      const parsed = parseAllowedUrls(raw);
      if (typeof parsed !== "string") return parsed;
      ctx.addIssue({ code: "custom", message: parsed });
      return z.NEVER;
    }),
  /** The webhook sender's poll for retries coming due (0 = this host sends no webhooks); new ones wake it at once. */
  webhookPollMs: intFromEnv(0, 600_000)
    .refine((v) => v === 0 || v >= 50, "must be 0 (off) or at least 50 ms")
    .default(1000),
  /** Webhook attempts in flight on this host at once (at most 2 of them to one endpoint, at most a tenant's share to one tenant). */
  webhookConcurrency: intFromEnv(1, 1024).default(16),
  /** One webhook attempt's timeout. */
  webhookTimeoutMs: intFromEnv(100, 60_000).default(WEBHOOK_LIMITS.attemptTimeoutMs),
  /** A claim not started within this is released and re-indexed. A host starts within ms of claiming. */
  claimTimeoutMs: intFromEnv(100, 3_600_000).default(DEFAULT_CLAIM_TIMEOUT_MS),
  /** A running job whose heartbeat is older than this is `lost` (default: 3 heartbeats + 2 s). */
  runLostAfterMs: intFromEnv(100, 3_600_000).optional(),
  /**
   * How often (jittered) the host purges finished jobs older than JOB_RETENTION_S (reaper/retention.ts),
   * one bounded set of 500-job batches per purge (0 = off: another host or the Worker cron does it).
   */
  purgeMs: intFromEnv(0, 86_400_000)
    .refine((v) => v === 0 || v >= 1000, "must be 0 (off) or at least 1000 ms")
    .default(60_000),
  /** Finished jobs (with their executions and inputs) are deleted this long after finishing. */
  jobRetentionS: intFromEnv(60, 10 * 365 * 86_400).default(JOB_RETENTION_DEFAULT_S),
  /** Periodic rebuild of the ready index from Postgres. */
  indexRebuildMs: intFromEnv(1000, 3_600_000).default(30_000),
  /** Cancel watch: one batched Redis read of the runs' hint keys this often. */
  cancelHintMs: intFromEnv(10, 600_000).default(200),
  /** Cancel watch: one batched Postgres read of the runs' durable cancel flags this often. */
  cancelDurableMs: intFromEnv(100, 600_000).default(1000),
  /** LISTEN for jobs becoming claimable and for cancels (instant wake-ups); off only for tests of the other paths. */
  listen: z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")]).default(true),
  /** Global model quota: slots per model across all hosts (0 = no quota). */
  quotaModelLimit: intFromEnv(0, 100_000).default(64),
  /**
   * Global quota per tenant across all hosts (0 = none). Half the per-model default: one tenant
   * can take at most half of a model's slots, so a second tenant always finds room, while a
   * single tenant still gets 4 full hosts' worth of concurrent model calls (8 run slots each).
   */
  quotaTenantLimit: intFromEnv(0, 100_000).default(32),
  /** How long a run may wait for a quota slot before it fails with quota_unavailable. */
  quotaMaxWaitMs: intFromEnv(0, 3_600_000).default(60_000),
  /**
   * Model calls that fail before producing output (429, 5xx, connection errors, timeouts) are
   * retried at most this many times per turn (0 = never), with exponential backoff and full
   * jitter (runner/model-retry.ts), or after the provider's Retry-After when it sends one.
   */
  modelRetryMax: intFromEnv(0, 100).default(4),
  /**
   * The output bound of a model call whose agent sets no `limits.max_output_tokens` (and of jobs
   * without an agent): every call is sent with one, so its worst-case cost, which budgets reserve
   * before the call (docs/quota.md), is bounded.
   */
  modelMaxOutputTokens: intFromEnv(1, AGENT_LIMITS.maxOutputTokens).default(AGENT_LIMITS.defaultMaxOutputTokens),
  /** The first backoff's ceiling; each retry doubles it, up to modelRetryMaxDelayMs. */
  modelRetryBaseMs: intFromEnv(1, 600_000).default(500),
  modelRetryMaxDelayMs: intFromEnv(1, 3_600_000).default(20_000),
  /**
   * A turn stops retrying when the next wait would end more than this long after its first
   * attempt began (the same minute a run may wait for a quota slot by default).
   */
  modelRetryBudgetMs: intFromEnv(0, 3_600_000).default(60_000),
  /** Docker sandboxes for tool calls (needs a Docker engine). */
  sandboxEnabled: z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")]).default(true),
  sandboxImage: z.string().min(1).default("ear-sandbox:local"),
  /**
   * Sandbox creations in flight at once on this host; the rest wait their turn, each run told so
   * by a `sandbox.waiting` event (why a small bound: sandbox-host/sandbox/manager.ts).
   */
  sandboxCreateConcurrency: intFromEnv(1, 256).default(DEFAULT_CREATE_CONCURRENCY),
  /**
   * While this many sandbox creations wait for a turn, the host claims no more jobs: what it has
   * admitted is served first and new work stays queued for a host with room.
   */
  sandboxCreateQueue: intFromEnv(1, 4096).default(8),
  /**
   * The gateway's queued-jobs limit per tenant, which the host applies to the child jobs a
   * delegating run creates (set it to the gateway's value; 0 turns it off, as there).
   */
  maxQueuedJobsPerTenant: intFromEnv(0, 10_000_000).default(LIMIT_DEFAULTS.maxQueuedJobsPerTenant),
  /**
   * How often (jittered) the host removes sandboxes on its Docker engine whose run Postgres says
   * is over, whichever host made them (a host that died and never came back leaves some).
   */
  sandboxJanitorMs: intFromEnv(200, 3_600_000).default(30_000),
  /**
   * The team's code tool modules (docs/tools.md "Code tools"): comma-separated paths (relative to
   * the host's working directory) or package specifiers, loaded once by main.ts at startup.
   */
  toolModules: z
    .string()
    .default("")
    .transform((v) =>
      v
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s.length > 0),
    ),
  /**
   * Code tool calls running at once on this host, each on its own thread; more wait their turn.
   * 4: a host's few cores are shared with the runs' own loop, and a tool that blocks holds a core.
   */
  toolConcurrency: intFromEnv(1, 64).default(4),
  /**
   * ARTIFACT_MAX_BYTES: the most a run's /workspace/out/ may hold (as one tar) for its files to be
   * kept as artifacts. At most the gateway's bound on one blob (32 MiB), which is the default.
   */
  artifactMaxBytes: intFromEnv(1, ARTIFACT_MAX_BYTES_DEFAULT).default(ARTIFACT_MAX_BYTES_DEFAULT),
  /**
   * SANDBOX_WORKSPACE_MAX_BYTES: the largest workspace snapshot (gzipped tar of /workspace) taken
   * at a step boundary; at most the gateway's 32 MiB blob bound, the default (docs/sandboxes.md).
   */
  snapshotMaxBytes: intFromEnv(1, ARTIFACT_MAX_BYTES_DEFAULT).default(ARTIFACT_MAX_BYTES_DEFAULT),
  /** TENANT_STORAGE_MAX_BYTES: a tenant's blobs together (docs/limits.md "Storage"). */
  tenantStorageMaxBytes: intFromEnv(0, Number.MAX_SAFE_INTEGER).default(TENANT_STORAGE_MAX_BYTES_DEFAULT),
  /** Each tool thread's heap limit (resourceLimits.maxOldGenerationSizeMb); past it the call fails tool_out_of_memory. */
  toolMemoryMb: intFromEnv(16, 16_384).default(256),
  /**
   * Model deltas arriving within this window become one `model.delta` event (a turn's first
   * delta goes out at once). Every event costs a trip through ingest, the job's log and each
   * watcher; a provider streaming 50 tokens/s sends one every ~20 ms, so a window below that
   * coalesces nothing: at step 10 of `npm run load` a run sent 17 events with 30 ms, 22 with 5 ms
   * (docs/capacity.md, "Hot path").
   */
  deltaCoalesceMs: intFromEnv(0, 1000).default(30),
  /** On shutdown: how long the outbox may take to deliver what is left. */
  outboxFlushTimeoutMs: intFromEnv(0, 600_000).default(5000),
});
export type HostConfig = z.infer<typeof HostConfigSchema>;

/**
 * The newcomer reserve when HOST_RESERVED_SLOTS is unset: 1 slot in 8 (a host of the default 8
 * slots keeps 1; one of fewer than 8 keeps none, so a small host is never left mostly idle). Over
 * a fleet that is 1/8 of its slots, which a lone tenant with more work than the rest leaves
 * idle: the price of a newcomer starting at once without preempting anyone (docs/claims.md).
 */
/**
 * One connection per run slot plus the claimer, heartbeat and sweep, up to 36: 4 hosts with 256
 * slots each opened 1,040 connections under 1,000 runs at once on `npm run dev`, past Postgres'
 * 300, and a third of the runs failed `internal_error` ("too many clients"); a Neon compute's
 * direct limit is lower still (112 at 0.25 CU). Past the bound a statement waits for a connection.
 */
export function defaultPgPoolMax(maxRuns: number): number {
  return Math.min(maxRuns + 4, 36);
}

export function defaultReservedSlots(maxRuns: number): number {
  return Math.floor(maxRuns / 8);
}

/** The newcomer reserve this host keeps. */
export function reservedSlotsOf(config: Pick<HostConfig, "maxRuns" | "reservedSlots">): number {
  return config.reservedSlots ?? defaultReservedSlots(config.maxRuns);
}

export type Env = Record<string, string | undefined>;

/** Which env variable feeds which config field, for error messages. */
const ENV_NAMES: Record<string, string> = {
  hostId: "HOST_ID",
  databaseUrl: "DATABASE_URL",
  databaseDirectUrl: "DATABASE_DIRECT_URL",
  "redis.url": "UPSTASH_REDIS_REST_URL",
  "redis.token": "UPSTASH_REDIS_REST_TOKEN",
  gatewayUrl: "GATEWAY_URL",
  signingSecret: "INTERNAL_SIGNING_SECRET",
  maxRuns: "HOST_MAX_RUNS",
  reservedSlots: "HOST_RESERVED_SLOTS",
  pgPoolMax: "HOST_PG_POOL_MAX",
  metricsPort: "HOST_METRICS_PORT",
  metricsHost: "HOST_METRICS_HOST",
  queueDepthMs: "HOST_QUEUE_DEPTH_MS",
  pollMs: "HOST_POLL_MS",
  idlePollMs: "HOST_IDLE_POLL_MS",
  idleMs: "HOST_IDLE_MS",
  sleepMaxMs: "HOST_SLEEP_MAX_MS",
  wakePollMs: "HOST_WAKE_POLL_MS",
  sweepMs: "HOST_SWEEP_MS",
  sweepOlderThanMs: "HOST_SWEEP_OLDER_THAN_MS",
  heartbeatMs: "HOST_HEARTBEAT_MS",
  shutdownGraceMs: "HOST_SHUTDOWN_GRACE_MS",
  outboxFlushTimeoutMs: "HOST_OUTBOX_FLUSH_TIMEOUT_MS",
  reapMs: "HOST_REAP_MS",
  scheduleMs: "HOST_SCHEDULE_MS",
  webhookAllowedUrls: "WEBHOOK_ALLOWED_URLS",
  webhookPollMs: "HOST_WEBHOOK_POLL_MS",
  webhookConcurrency: "HOST_WEBHOOK_CONCURRENCY",
  webhookTimeoutMs: "HOST_WEBHOOK_TIMEOUT_MS",
  claimTimeoutMs: "HOST_CLAIM_TIMEOUT_MS",
  runLostAfterMs: "HOST_RUN_LOST_AFTER_MS",
  indexRebuildMs: "HOST_INDEX_REBUILD_MS",
  purgeMs: "HOST_PURGE_MS",
  jobRetentionS: "JOB_RETENTION_S",
  cancelHintMs: "HOST_CANCEL_HINT_MS",
  cancelDurableMs: "HOST_CANCEL_DURABLE_MS",
  listen: "HOST_LISTEN",
  toolModules: "HOST_TOOLS",
  toolConcurrency: "HOST_TOOLS_CONCURRENCY",
  artifactMaxBytes: "ARTIFACT_MAX_BYTES",
  snapshotMaxBytes: "SANDBOX_WORKSPACE_MAX_BYTES",
  tenantStorageMaxBytes: "TENANT_STORAGE_MAX_BYTES",
  toolMemoryMb: "HOST_TOOLS_MEMORY_MB",
  quotaModelLimit: "QUOTA_MODEL_LIMIT",
  quotaTenantLimit: "QUOTA_TENANT_LIMIT",
  quotaMaxWaitMs: "QUOTA_MAX_WAIT_MS",
  modelRetryMax: "MODEL_RETRY_MAX",
  modelMaxOutputTokens: "MODEL_MAX_OUTPUT_TOKENS",
  modelRetryBaseMs: "MODEL_RETRY_BASE_MS",
  modelRetryMaxDelayMs: "MODEL_RETRY_MAX_DELAY_MS",
  modelRetryBudgetMs: "MODEL_RETRY_BUDGET_MS",
  sandboxEnabled: "SANDBOX_ENABLED",
  sandboxImage: "SANDBOX_IMAGE",
  sandboxCreateConcurrency: "SANDBOX_CREATE_CONCURRENCY",
  sandboxCreateQueue: "SANDBOX_CREATE_QUEUE",
  maxQueuedJobsPerTenant: "MAX_QUEUED_JOBS_PER_TENANT",
  sandboxJanitorMs: "SANDBOX_JANITOR_MS",
  deltaCoalesceMs: "HOST_DELTA_COALESCE_MS",
};

/** Every variable the host configuration reads (the deploy manifests' test checks against it). */
export const HOST_ENV_NAMES: readonly string[] = Object.values(ENV_NAMES);

export class HostConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid sandbox-host configuration:\n  ${problems.join("\n  ")}`);
    this.name = "HostConfigError";
  }
}

export function defaultHostId(): string {
  const safeHost = hostname().replace(/[^A-Za-z0-9._:-]/g, "-") || "host";
  return `${safeHost}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/** Parse the env a process was given. Empty strings count as unset. */
export function hostConfigFromEnv(env: Env): HostConfig {
  const v = (name: string) => {
    const value = env[name]?.trim();
    return value === "" ? undefined : value;
  };
  const raw = {
    hostId: v("HOST_ID") ?? defaultHostId(),
    databaseUrl: v("DATABASE_URL"),
    databaseDirectUrl: v("DATABASE_DIRECT_URL"),
    redis: { url: v("UPSTASH_REDIS_REST_URL"), token: v("UPSTASH_REDIS_REST_TOKEN") },
    gatewayUrl: v("GATEWAY_URL"),
    signingSecret: v("INTERNAL_SIGNING_SECRET"),
    maxRuns: v("HOST_MAX_RUNS"),
    reservedSlots: v("HOST_RESERVED_SLOTS"),
    pgPoolMax: v("HOST_PG_POOL_MAX"),
    metricsPort: v("HOST_METRICS_PORT"),
    metricsHost: v("HOST_METRICS_HOST"),
    queueDepthMs: v("HOST_QUEUE_DEPTH_MS"),
    pollMs: v("HOST_POLL_MS"),
    idlePollMs: v("HOST_IDLE_POLL_MS"),
    idleMs: v("HOST_IDLE_MS"),
    sleepMaxMs: v("HOST_SLEEP_MAX_MS"),
    wakePollMs: v("HOST_WAKE_POLL_MS"),
    sweepMs: v("HOST_SWEEP_MS"),
    sweepOlderThanMs: v("HOST_SWEEP_OLDER_THAN_MS"),
    heartbeatMs: v("HOST_HEARTBEAT_MS"),
    shutdownGraceMs: v("HOST_SHUTDOWN_GRACE_MS"),
    outboxFlushTimeoutMs: v("HOST_OUTBOX_FLUSH_TIMEOUT_MS"),
    reapMs: v("HOST_REAP_MS"),
    scheduleMs: v("HOST_SCHEDULE_MS"),
    webhookAllowedUrls: v("WEBHOOK_ALLOWED_URLS"),
    webhookPollMs: v("HOST_WEBHOOK_POLL_MS"),
    webhookConcurrency: v("HOST_WEBHOOK_CONCURRENCY"),
    webhookTimeoutMs: v("HOST_WEBHOOK_TIMEOUT_MS"),
    claimTimeoutMs: v("HOST_CLAIM_TIMEOUT_MS"),
    runLostAfterMs: v("HOST_RUN_LOST_AFTER_MS"),
    indexRebuildMs: v("HOST_INDEX_REBUILD_MS"),
    purgeMs: v("HOST_PURGE_MS"),
    jobRetentionS: v("JOB_RETENTION_S"),
    cancelHintMs: v("HOST_CANCEL_HINT_MS"),
    cancelDurableMs: v("HOST_CANCEL_DURABLE_MS"),
    listen: v("HOST_LISTEN"),
    quotaModelLimit: v("QUOTA_MODEL_LIMIT"),
    quotaTenantLimit: v("QUOTA_TENANT_LIMIT"),
    quotaMaxWaitMs: v("QUOTA_MAX_WAIT_MS"),
    modelRetryMax: v("MODEL_RETRY_MAX"),
    modelMaxOutputTokens: v("MODEL_MAX_OUTPUT_TOKENS"),
    modelRetryBaseMs: v("MODEL_RETRY_BASE_MS"),
    modelRetryMaxDelayMs: v("MODEL_RETRY_MAX_DELAY_MS"),
    modelRetryBudgetMs: v("MODEL_RETRY_BUDGET_MS"),
    sandboxEnabled: v("SANDBOX_ENABLED"),
    sandboxImage: v("SANDBOX_IMAGE"),
    sandboxCreateConcurrency: v("SANDBOX_CREATE_CONCURRENCY"),
    sandboxCreateQueue: v("SANDBOX_CREATE_QUEUE"),
    maxQueuedJobsPerTenant: v("MAX_QUEUED_JOBS_PER_TENANT"),
    sandboxJanitorMs: v("SANDBOX_JANITOR_MS"),
    toolModules: v("HOST_TOOLS"),
    toolConcurrency: v("HOST_TOOLS_CONCURRENCY"),
    artifactMaxBytes: v("ARTIFACT_MAX_BYTES"),
    snapshotMaxBytes: v("SANDBOX_WORKSPACE_MAX_BYTES"),
    tenantStorageMaxBytes: v("TENANT_STORAGE_MAX_BYTES"),
    toolMemoryMb: v("HOST_TOOLS_MEMORY_MB"),
    deltaCoalesceMs: v("HOST_DELTA_COALESCE_MS"),
  };
  const parsed = HostConfigSchema.safeParse(raw);
  if (parsed.success) {
    // Checked here rather than in the schema: it relates two variables.
    if (parsed.data.reservedSlots !== undefined && parsed.data.reservedSlots >= parsed.data.maxRuns)
      throw new HostConfigError([
        `HOST_RESERVED_SLOTS: must be less than HOST_MAX_RUNS (${parsed.data.maxRuns}), or the host runs only newcomers' first jobs`,
      ]);
    return parsed.data;
  }
  const problems = parsed.error.issues.map((issue) => {
    const path = issue.path.join(".");
    const name = ENV_NAMES[path] ?? path;
    const missing = issue.code === "invalid_type" && issue.input === undefined;
    return missing ? `${name} is required` : `${name}: ${issue.message}`;
  });
  throw new HostConfigError(problems);
}

/**
 * Where the LISTEN connection goes. DATABASE_DIRECT_URL when given; DATABASE_URL when it is not a
 * pooler URL; otherwise none, with the reason: the host then runs on its polling paths (the same
 * as HOST_LISTEN=false: wake-ups come from the index and the sweep, a few hundred ms later).
 * Not a refusal to start: polling is a correct mode, only slower to wake.
 */
export function listenDatabaseUrl(
  config: Pick<HostConfig, "listen" | "databaseUrl" | "databaseDirectUrl">,
): { url: string; warning?: undefined } | { url: null; warning: string | null } {
  if (!config.listen) return { url: null, warning: null };
  if (config.databaseDirectUrl) return { url: config.databaseDirectUrl };
  if (!isPoolerUrl(config.databaseUrl)) return { url: config.databaseUrl };
  return {
    url: null,
    warning:
      "DATABASE_URL is a pooler URL and DATABASE_DIRECT_URL is not set: LISTEN cannot work through a transaction pooler, so it is off and the host polls (set DATABASE_DIRECT_URL to the unpooled endpoint for instant wake-ups)",
  };
}

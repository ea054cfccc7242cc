/**
 * One sandbox-host as a list of services: its parts (built by host-parts.ts) started in the
 * order below and stopped in the reverse order, each stop's reason written next to it. Takes a
 * parsed config and its collaborators (model client, logger) so tests can start several hosts in
 * one process; main.ts is the production entry that builds them from the environment.
 */
import type { LeaseStore } from "../src/quota/lease-store";
import type { HostConfig } from "./host-config";
import { buildParts, connectPostgres, type HostDeps, type HostParts, heartbeatPool } from "./host-parts";
import { type Service, type StartedServices, startInOrder } from "./lifecycle/service";
import { createLogger } from "./log";
import { type Readiness, startMetricsServer } from "./metrics/server";
import type { OffloadPool } from "./offload/pool";

/** Offload work still running this long after the runs ended is stopped with its thread. */
export const OFFLOAD_DRAIN_MS = 5000;

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
  const beats = heartbeatPool(config, log);
  let parts: HostParts;
  try {
    parts = await buildParts(config, deps, log, pool, beats);
  } catch (err) {
    await pool.end().catch(() => {});
    await beats.end().catch(() => {});
    throw err;
  }
  const { runner, outbox, offload, metrics } = parts;

  let stopping = false;
  let server: MetricsServer | undefined;
  let graceMs = config.shutdownGraceMs;
  const services: Service[] = [
    // Stopped last: every other part writes through the pool until it has stopped.
    { name: "postgres pool", stop: async () => void (await Promise.all([pool.end(), beats.end()])) },
    // Published before the first claim; removed once the runs are over (they still use the tools).
    parts.toolCatalog,
    // After the runs: their last spans are ended by then, and this exports what is buffered.
    { name: "tracing", stop: () => deps.tracing?.shutdown() ?? Promise.resolve() },
    // Up before any work starts (the dev orchestrator and the probes wait on it); closed after
    // the outbox so /metrics shows the final backlog and runs while the shutdown drains.
    {
      name: "metrics server",
      start: async () => {
        server = await startMetricsServer({
          port: config.metricsPort,
          host: config.metricsHost,
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
    ...(parts.codeTools ? [{ name: "code tools", stop: () => codeToolsClose(parts, OFFLOAD_DRAIN_MS) }] : []),
    // Stopped after admission: running jobs get the grace period (HOST_SHUTDOWN_GRACE_MS), then
    // are stopped and handed off to a new execution (or fail host_shutdown when not allowed).
    {
      name: "runs",
      stop: async () => {
        log.info("admission stopped; waiting for running jobs", { runs: runner.active, grace_ms: graceMs });
        await runner.shutdown(graceMs);
      },
    },
    // The queue-depth sampler reads Postgres only; stopped with the recovery loops.
    parts.queueDepth,
    // Recovery and upkeep loops (the janitor, then one service per duty, named like the Worker's
    // cron backstops): stopped with admission, before the wait for runs (they start no run here).
    ...(parts.janitor ? [parts.janitor] : []),
    parts.reaper,
    parts.expiry,
    parts.indexRebuild,
    ...(parts.retention ? [parts.retention] : []),
    // Schedule ticks make jobs (any host's claimer runs them): stopped with the recovery loops.
    ...(parts.scheduler ? [parts.scheduler] : []),
    // Scores eval cases (a judge's job is made like a tick's): stopped with the recovery loops; a
    // pass cut short leaves its cases unscored for any host's next pass.
    parts.evalScorer,
    // Webhook deliveries: stopped after admission and before the runs' wait (attempts in flight
    // end by their timeout; a delivery a run's end queues during the shutdown is sent by any host).
    ...(parts.webhooks ? [parts.webhooks] : []),
    // Admission: the claimer, then what wakes it. Stopped first, so no claim starts during the shutdown.
    parts.claimer,
    ...(parts.listener ? [parts.listener] : []),
    // After the listener it pauses and resumes; stopped before it (a stopping host is awake).
    ...(parts.sleep ? [parts.sleep] : []),
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
    await parts.codeTools?.close({ timeoutMs: 0 }).catch(() => {});
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

/** Calls still running this long after the runs ended are stopped with their threads. */
function codeToolsClose(parts: HostParts, timeoutMs: number): Promise<void> {
  return parts.codeTools?.close({ timeoutMs }) ?? Promise.resolve();
}

/**
 * One prom-client registry per host (never the global one, so two hosts in one test process
 * do not share counters), with every series labelled by host id: alerts take the max across
 * hosts, never an average.
 */
import { performance } from "node:perf_hooks";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

export type ClaimSource = "index" | "notify" | "sweep" | "poll";
export type ClaimResult = "won" | "lost";

export interface HostMetrics {
  registry: Registry;
  claims: Counter<"source" | "result">;
  runsActive: Gauge;
  runsFinished: Counter<"outcome">;
  outboxBacklog: Gauge;
  eventLoopLag: Histogram;
  /** Stops the lag probe. */
  stop(): void;
}

/**
 * `event_loop_lag_seconds`: a timer asks to wake every `probeMs` and records how late it woke.
 * 100 ms keeps the probe itself negligible (10 wakeups/s) while a 50 ms stall still shows as a
 * 50 ms sample; buckets start at 1 ms because an idle loop wakes ~0.1-1 ms late.
 */
export function createHostMetrics(hostId: string, probeMs = 100): HostMetrics {
  const registry = new Registry();
  registry.setDefaultLabels({ host: hostId });
  collectDefaultMetrics({ register: registry });

  const eventLoopLag = new Histogram({
    name: "event_loop_lag_seconds",
    help: "How late a 100 ms timer fired on this host's event loop",
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  const claims = new Counter({
    name: "claims_total",
    help: "Claim attempts by where the candidate came from and whether the one-row CAS hit",
    labelNames: ["source", "result"] as const,
    registers: [registry],
  });
  const runsActive = new Gauge({
    name: "runs_active",
    help: "Run slots in use (claimed or running jobs held by this host)",
    registers: [registry],
  });
  const runsFinished = new Counter({
    name: "runs_finished_total",
    help: "Runs this host ended, by outcome",
    labelNames: ["outcome"] as const,
    registers: [registry],
  });
  const outboxBacklog = new Gauge({
    name: "outbox_backlog",
    help: "Events produced but not yet acknowledged by the gateway",
    registers: [registry],
  });

  let expected = performance.now() + probeMs;
  const timer = setInterval(() => {
    const now = performance.now();
    eventLoopLag.observe(Math.max(0, now - expected) / 1000);
    expected = now + probeMs;
  }, probeMs);
  timer.unref();

  return {
    registry,
    claims,
    runsActive,
    runsFinished,
    outboxBacklog,
    eventLoopLag,
    stop: () => clearInterval(timer),
  };
}

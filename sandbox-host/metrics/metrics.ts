/**
 * One prom-client registry per host (never the global one, so two hosts in one test process
 * do not share counters), with every series labelled by host id: alerts take the max across
 * hosts, never an average.
 */
import { performance } from "node:perf_hooks";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { LatencyView } from "../../src/contracts/job";
import type { OffloadObserver } from "../offload/pool";

export type ClaimSource = "index" | "notify" | "sweep" | "poll";

export type RunLatencyPhase = "dispatch" | "preparation" | "model_first_output" | "total";
export type QuotaWaitOutcome = "admitted" | "timed_out" | "aborted" | "budget_exhausted";
/** How a budget reservation ended: admitted with it, or refused because the budget was used up. */
export type BudgetReservationOutcome = "reserved" | "refused";
/** How a settlement ended: counted, a repeat of one already counted, or Redis not reachable. */
export type BudgetSettlementOutcome = "counted" | "repeated" | "unavailable";
/** What a timed-out wait was last waiting for; "none" for admitted and aborted waits. */
export type QuotaWaitReason = "none" | "limit_reached" | "redis_unavailable";
export type SandboxOpOutcome = "ok" | "error";

export interface HostMetrics {
  registry: Registry;
  claims: Counter<"source" | "result">;
  runsActive: Gauge;
  runsFinished: Counter<"outcome">;
  /** Runs this host suspended at a waitpoint, by what they wait for (approval | input). */
  waitsStarted: Counter<"kind">;
  /** Waits that ended and resumed here: suspend → decision, by kind and decision (approve | deny | input). */
  waitDuration: Histogram<"kind" | "decision">;
  outboxBacklog: Gauge;
  eventLoopLag: Histogram;
  /** Fed by `observeRunPhases` from a finished run's timing facts. */
  runPhase: Histogram<"phase">;
  /** Fed by `observeQuotaWait` once per finished wait (admitted, timed out and why, aborted). */
  quotaWait: Histogram<"outcome" | "reason">;
  /** 1 while the quota's circuit breaker refuses Redis calls locally (set on its transitions). */
  quotaBreakerOpen: Gauge;
  /** Leases this host holds right now (set, or inc on acquire / dec on release or loss). */
  quotaLeasesHeld: Gauge;
  /** A renewal found the lease purged: the holder lost its slot and must stop model calls. */
  quotaLeasesLost: Counter;
  /** Model calls that reserved their worst case against a budget before they were made, or were refused. */
  budgetReservations: Counter<"outcome">;
  /** Reservations settled to a call's real cost (docs/quota.md, "Budgets: reserve, then settle"). */
  budgetSettlements: Counter<"outcome">;
  /** A run stopped itself: no heartbeat acknowledged within the lost bound (ActiveRun.renew). */
  runsSelfFenced: Counter;
  sandboxesActive: Gauge;
  /** Reads the sandbox creations waiting for a turn at each scrape (set once the manager exists). */
  watchSandboxCreateQueue(queued: () => number): void;
  sandboxCreate: Histogram<"outcome">;
  sandboxDelete: Histogram<"outcome">;
  /** cancel_requested_at → terminal state written, observed by the host that converged it. */
  cancelConvergence: Histogram<"outcome">;
  /** Tokens of model calls by public model name, kind (prompt|completion) and whether estimated. */
  modelTokens: Counter<"model" | "kind" | "estimated">;
  /** US dollars of priced model calls (the registry's `pricing`), by public model name and tenant. */
  modelCost: Counter<"model" | "tenant">;
  /** Model calls by model and how they ended (ok, retried, failed, aborted). */
  modelCalls: Counter<"model" | "outcome">;
  /** Retries of failed model calls by model and reason (the ModelError code). */
  modelRetries: Counter<"model" | "reason">;
  modelFallbacks: Counter<"from" | "to" | "reason">;
  /** The wait before each retry (Retry-After or backoff). */
  modelRetryDelay: Histogram;
  offloadInFlight: Gauge;
  offloadQueued: Gauge;
  offloadRejected: Counter<"reason">;
  offloadTaskDuration: Histogram<"task" | "outcome">;
  /** The offload pool reports through this. */
  offloadObserver: OffloadObserver;
  /** Stops the lag probe. */
  stop(): void;
}

// Phases run from a few ms (preparation) to minutes (a long agent run): 5 ms … 30 min.
const PHASE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800];
// Docker create/delete: ~100 ms warm to the 120 s delete timeout.
const SANDBOX_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
// Cancel: the ≈200 ms hint poll is the floor, the ≈1 s durable poll the usual ceiling.
const CANCEL_BUCKETS = [0.05, 0.1, 0.2, 0.3, 0.5, 1, 1.5, 2, 3, 5, 10, 30];

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
    help: `How late a ${probeMs} ms timer fired on this host's event loop (one sample per wakeup)`,
    // 1 ms (an idle loop) … 5 s (a frozen one); dense around 10-250 ms where trouble starts.
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  const claims = new Counter({
    name: "claims_total",
    help: "Jobs a claim took (won) or picked for a slot but another claimer took first (lost), by what woke the claim",
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

  const runPhase = new Histogram({
    name: "run_phase_seconds",
    help: "Run latency by phase, from the run's timing facts: dispatch (created→started), preparation (started→prepared), model_first_output (prepared→first output), total (created→finished)",
    labelNames: ["phase"] as const,
    buckets: PHASE_BUCKETS,
    registers: [registry],
  });
  const quotaWait = new Histogram({
    name: "quota_wait_seconds",
    help: "Time a run waited for a global model-quota lease, by how the wait ended (admitted, timed_out, aborted) and, for a timeout, what it was waiting for (limit_reached, redis_unavailable)",
    labelNames: ["outcome", "reason"] as const,
    buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    registers: [registry],
  });
  // Every way a wait can end is a series from the start: an alert on timeouts needs a zero to rise from.
  for (const [outcome, reason] of QUOTA_WAIT_SERIES) quotaWait.zero({ outcome, reason });
  const quotaBreakerOpen = new Gauge({
    name: "quota_breaker_open",
    help: "1 while the quota circuit breaker is open (Redis failing: no admission, runs wait with reason redis_unavailable)",
    registers: [registry],
  });
  const quotaLeasesHeld = new Gauge({
    name: "quota_leases_held",
    help: "Global model-quota leases this host holds right now",
    registers: [registry],
  });
  const quotaLeasesLost = new Counter({
    name: "quota_leases_lost_total",
    help: "Leases lost while held: found purged on renewal, or past their local deadline at a model call (the holder stopped its model calls); nonzero means heartbeats or Redis were late",
    registers: [registry],
  });
  const budgetReservations = new Counter({
    name: "budget_reservations_total",
    help: "Model calls that reserved their worst-case cost against a budget before being made (outcome reserved), or were refused because the budget's spend plus reservations had reached it (refused)",
    labelNames: ["outcome"] as const,
    registers: [registry],
  });
  const budgetSettlements = new Counter({
    name: "budget_settlements_total",
    help: "Budget reservations settled to the call's real cost: counted, repeated (already counted; added nothing), unavailable (Redis unreachable: the reservation expires, the ledger keeps the call)",
    labelNames: ["outcome"] as const,
    registers: [registry],
  });
  const runsSelfFenced = new Counter({
    name: "runs_self_fenced_total",
    help: "Runs that stopped themselves because no heartbeat was acknowledged within the lost bound (Postgres unreachable, or the host paused): another host may take the job on from there",
    registers: [registry],
  });
  const sandboxesActive = new Gauge({
    name: "sandboxes_active",
    help: "Docker sandboxes this host has created and not yet deleted",
    registers: [registry],
  });
  let sandboxQueued: () => number = () => 0;
  new Gauge({
    name: "sandbox_create_queued",
    help: "Sandbox creations waiting for a turn (SANDBOX_CREATE_CONCURRENCY); the host claims nothing while SANDBOX_CREATE_QUEUE wait",
    registers: [registry],
    collect() {
      this.set(sandboxQueued());
    },
  });
  const sandboxCreate = new Histogram({
    name: "sandbox_create_seconds",
    help: "Time to create a sandbox (network + container, started), by outcome",
    labelNames: ["outcome"] as const,
    buckets: SANDBOX_BUCKETS,
    registers: [registry],
  });
  const sandboxDelete = new Histogram({
    name: "sandbox_delete_seconds",
    help: "Time to delete a sandbox (stop, remove container and network), by outcome",
    labelNames: ["outcome"] as const,
    buckets: SANDBOX_BUCKETS,
    registers: [registry],
  });
  const cancelConvergence = new Histogram({
    name: "cancel_convergence_seconds",
    help: "Cancel requested (durable) → the run's terminal state written, by final state",
    labelNames: ["outcome"] as const,
    buckets: CANCEL_BUCKETS,
    registers: [registry],
  });
  const modelTokens = new Counter({
    name: "model_tokens_total",
    help: "Tokens of model calls, by public model name, kind (prompt|completion) and estimated (true when the provider reported no usage and the host estimated it)",
    labelNames: ["model", "kind", "estimated"] as const,
    registers: [registry],
  });
  // Per tenant because spend is what an operator bills and budgets by; the series exist only for
  // tenants that ran a priced model on this host.
  const modelCost = new Counter({
    name: "model_cost_usd_total",
    help: "US dollars of model calls at the registry's pricing (tokens × price per million), by public model name and tenant; unpriced models add nothing",
    labelNames: ["model", "tenant"] as const,
    registers: [registry],
  });
  const modelCalls = new Counter({
    name: "model_calls_total",
    help: "Model calls (one request to a provider each), by public model name and outcome: ok, retried (failed before output and tried again), fallback (refused before output, the turn went on to the agent's next model), failed, aborted",
    labelNames: ["model", "outcome"] as const,
    registers: [registry],
  });
  const modelRetries = new Counter({
    name: "model_retries_total",
    help: "Model calls retried after failing before output, by public model name and reason (rate_limited, provider_error, network_error)",
    labelNames: ["model", "reason"] as const,
    registers: [registry],
  });
  const modelFallbacks = new Counter({
    name: "model_fallbacks_total",
    help: "Model turns sent on to an agent's next model after a call refused before its first token, by public model names (from, to) and reason (rate_limited, provider_error, network_error)",
    labelNames: ["from", "to", "reason"] as const,
    registers: [registry],
  });
  const modelRetryDelay = new Histogram({
    name: "model_retry_delay_seconds",
    help: "The wait before a model call's retry (the provider's Retry-After, else backoff with full jitter)",
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60],
    registers: [registry],
  });
  const waitsStarted = new Counter({
    name: "waits_started_total",
    help: "Runs suspended at a waitpoint (their execution ended `suspended`, the job `waiting`), by kind: approval or input (ask_user)",
    labelNames: ["kind"] as const,
    registers: [registry],
  });
  const waitDuration = new Histogram({
    name: "wait_duration_seconds",
    help: "How long a resumed job waited (suspend → the decision), observed by the host that resumes it, by kind and decision (approve, deny, input)",
    labelNames: ["kind", "decision"] as const,
    buckets: [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14_400, 86_400],
    registers: [registry],
  });
  const offloadInFlight = new Gauge({
    name: "offload_tasks_in_flight",
    help: "Offload tasks running on worker threads (slots held until the worker really finishes)",
    registers: [registry],
  });
  const offloadQueued = new Gauge({
    name: "offload_tasks_queued",
    help: "Offload tasks admitted and waiting for a worker thread",
    registers: [registry],
  });
  const offloadRejected = new Counter({
    name: "offload_tasks_rejected_total",
    help: "Offload tasks refused at admission: queue_full (bounded queue at its limit) or closed (shutting down)",
    labelNames: ["reason"] as const,
    registers: [registry],
  });
  const offloadTaskDuration = new Histogram({
    name: "offload_task_duration_seconds",
    help: "Offload task run time on its worker thread (start → worker done), by task and outcome",
    labelNames: ["task", "outcome"] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  for (const reason of ["queue_full", "closed"]) offloadRejected.inc({ reason }, 0);

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
    waitsStarted,
    waitDuration,
    outboxBacklog,
    eventLoopLag,
    runPhase,
    quotaWait,
    quotaBreakerOpen,
    quotaLeasesHeld,
    quotaLeasesLost,
    budgetReservations,
    budgetSettlements,
    runsSelfFenced,
    sandboxesActive,
    watchSandboxCreateQueue: (queued) => {
      sandboxQueued = queued;
    },
    sandboxCreate,
    sandboxDelete,
    cancelConvergence,
    modelTokens,
    modelCost,
    modelCalls,
    modelRetries,
    modelFallbacks,
    modelRetryDelay,
    offloadInFlight,
    offloadQueued,
    offloadRejected,
    offloadTaskDuration,
    offloadObserver: {
      inFlight: (n) => offloadInFlight.set(n),
      queued: (n) => offloadQueued.set(n),
      rejected: (reason) => offloadRejected.inc({ reason }),
      finished: (task, outcome, seconds) => offloadTaskDuration.observe({ task, outcome }, seconds),
    },
    stop: () => clearInterval(timer),
  };
}

/**
 * Observe a finished run's phases from the latencies the one timing serializer derived from its
 * timing facts (src/domain/timing.ts), so the histograms and the API can never disagree. A
 * missing point (null) is not observed.
 */
export function observeRunPhases(metrics: Pick<HostMetrics, "runPhase">, latency: LatencyView): void {
  const phases: Array<[RunLatencyPhase, number | null]> = [
    ["dispatch", latency.dispatch_latency_ms],
    ["preparation", latency.preparation_latency_ms],
    ["model_first_output", latency.model_first_output_latency_ms],
    ["total", latency.total_latency_ms],
  ];
  for (const [phase, ms] of phases) if (ms !== null) metrics.runPhase.observe({ phase }, ms / 1000);
}

const QUOTA_WAIT_SERIES: Array<[QuotaWaitOutcome, QuotaWaitReason]> = [
  ["admitted", "none"],
  ["timed_out", "limit_reached"],
  ["timed_out", "redis_unavailable"],
  ["aborted", "none"],
];

/** The quota integration's one call per finished wait (src/quota/wait.ts's WaitOutcome fits). */
export function observeQuotaWait(
  metrics: Pick<HostMetrics, "quotaWait">,
  wait: { kind: QuotaWaitOutcome; waitedMs: number; reason?: Exclude<QuotaWaitReason, "none"> },
): void {
  const reason: QuotaWaitReason = wait.kind === "timed_out" ? (wait.reason ?? "none") : "none";
  metrics.quotaWait.observe({ outcome: wait.kind, reason }, Math.max(0, wait.waitedMs) / 1000);
}

/** Time one sandbox create/delete into its histogram, by outcome; rethrows. */
export async function timeSandboxOp<T>(histogram: Histogram<"outcome">, op: () => Promise<T>): Promise<T> {
  const end = histogram.startTimer();
  try {
    const value = await op();
    end({ outcome: "ok" satisfies SandboxOpOutcome });
    return value;
  } catch (err) {
    end({ outcome: "error" satisfies SandboxOpOutcome });
    throw err;
  }
}

/**
 * The autoscaling signal: how many jobs wait for a run slot and how long the oldest has waited,
 * overall and per tenant, sampled from Postgres on a slow timer and exported on /metrics.
 *
 * Every host samples the same global numbers (no leader): a scaler reads `max` across hosts,
 * so hosts coming and going never leave the signal without a reporter, and no lock or lease is
 * needed to pick one. The price is one statement per host per interval. Measured on the embedded
 * Postgres 18 of the tests (test/integration/queue-depth.test.ts prints the plan): with 200,000
 * finished jobs, 500 claimed and 5,100 waiting across 50 tenants it is an Index Scan of
 * jobs_ready_idx under one hash aggregate, 1.1-1.3 ms; the finished history costs nothing, and
 * the time grows with the number waiting. 100 hosts at the 15 s default are ~7 statements/s of
 * ~1 ms: a small part of one connection's time, taken from each host's own pool.
 * 15 s because a scaler acts on minutes (KEDA polls every 30 s by default, the HPA stabilises
 * over minutes); a faster sample buys no faster scaling.
 *
 * Per-tenant series are capped at the TENANT_SERIES tenants with the most waiting jobs: every
 * series is repeated on every host, so an uncapped label would multiply tenants by hosts.
 *
 * While the fleet is idle (lifecycle/activity.ts) the host's last look found nothing waiting and
 * nothing was announced since, so the numbers are known to be zero: they are set without a
 * statement, every HOST_IDLE_MS. When work appears the next sample comes within one interval.
 */
import { Counter, Gauge } from "prom-client";
import type { Db } from "../../src/db/client";
import { queueDepthByTenant } from "../../src/db/queue-depth-repo";
import type { FleetActivity } from "../lifecycle/activity";
import { PeriodicService } from "../lifecycle/periodic";
import { errorFields, type Logger } from "../log";
import type { HostMetrics } from "./metrics";

/** 20 tenants × 100 hosts × 2 gauges = 4,000 series at most: a small share of one Prometheus. */
export const TENANT_SERIES = 20;

export interface QueueDepthGauges {
  waiting: Gauge;
  oldestAge: Gauge;
  waitingByTenant: Gauge<"tenant">;
  oldestAgeByTenant: Gauge<"tenant">;
  errors: Counter;
}

export function registerQueueDepthGauges(registry: HostMetrics["registry"]): QueueDepthGauges {
  return {
    waiting: new Gauge({
      name: "queue_jobs_waiting",
      help: "Jobs queued and not yet claimed by any host (global: every host reports the same number; read max across hosts)",
      registers: [registry],
    }),
    oldestAge: new Gauge({
      name: "queue_oldest_waiting_age_seconds",
      help: "Age of the oldest job waiting for a run slot, by Postgres's clock (global; 0 when none waits)",
      registers: [registry],
    }),
    waitingByTenant: new Gauge({
      name: "queue_jobs_waiting_by_tenant",
      help: `Jobs waiting per tenant, for the ${TENANT_SERIES} tenants with the most (global; read max across hosts)`,
      labelNames: ["tenant"] as const,
      registers: [registry],
    }),
    oldestAgeByTenant: new Gauge({
      name: "queue_oldest_waiting_age_seconds_by_tenant",
      help: `Age of each tenant's oldest waiting job, for the ${TENANT_SERIES} tenants with the most waiting (global)`,
      labelNames: ["tenant"] as const,
      registers: [registry],
    }),
    errors: new Counter({
      name: "queue_depth_sample_errors_total",
      help: "Queue-depth samples that failed (the gauges keep their last value: alert on this rising)",
      registers: [registry],
    }),
  };
}

export class QueueDepthSampler extends PeriodicService {
  readonly gauges: QueueDepthGauges;

  constructor(
    private readonly opts: {
      db: Db;
      registry: HostMetrics["registry"];
      intervalMs: number;
      log: Logger;
      activity?: FleetActivity;
    },
  ) {
    // The first sample at once, so /metrics has the numbers from the start; then every
    // intervalMs ±10% (hosts need not align: each reports the same global numbers).
    super(
      {
        name: "queue depth",
        everyMs: opts.intervalMs,
        spread: 0.1,
        firstDelayMs: 0,
        activity: opts.activity,
        idleAtLeastBusy: true,
      },
      () => this.sample(),
    );
    this.gauges = registerQueueDepthGauges(opts.registry);
  }

  /** One sample now (also the first one at start, so /metrics has the numbers from the beginning). */
  async sample(): Promise<void> {
    const g = this.gauges;
    try {
      const rows = this.opts.activity?.idle ? [] : await queueDepthByTenant(this.opts.db);
      g.waiting.set(rows.reduce((n, r) => n + r.waiting, 0));
      g.oldestAge.set(rows.reduce((a, r) => Math.max(a, r.oldestAgeSeconds), 0));
      const top = rows.sort((a, b) => b.waiting - a.waiting).slice(0, TENANT_SERIES);
      // A tenant whose queue drained must vanish, not keep its last number.
      g.waitingByTenant.reset();
      g.oldestAgeByTenant.reset();
      for (const r of top) {
        g.waitingByTenant.set({ tenant: r.tenantId }, r.waiting);
        g.oldestAgeByTenant.set({ tenant: r.tenantId }, r.oldestAgeSeconds);
      }
    } catch (err) {
      g.errors.inc();
      this.opts.log.warn("queue depth sample failed", errorFields(err));
    }
  }

  /** HOST_QUEUE_DEPTH_MS = 0 turns the sampler off. */
  override start(): void {
    if (this.opts.intervalMs > 0) super.start();
  }
}

/**
 * The host's webhook sender: sends the outbox's due deliveries (src/db/webhooks-repo.ts), on
 * every host, so a delivery needs no particular host alive: a host killed after a job's state
 * change, or mid-send, leaves the row due (its lease runs out) and any host sends it, under the
 * same `webhook-id`. At least once, never exactly once: an endpoint dedupes by that id.
 *
 * Bounded: at most `concurrency` attempts in flight on this host, at most
 * WEBHOOK_LIMITS.perEndpointInFlight of them to one endpoint (a slow or hanging endpoint holds two
 * slots, never the others' ones), at most a tenant's share of them to one tenant's endpoints (so
 * one tenant's slow endpoints never hold every slot: claimDeliveries), each cut at the attempt
 * timeout. An endpoint that keeps failing is paused (recordAttempt), and holds no slot meanwhile. Redirects are not followed
 * (a 3xx is a failed attempt): the allowlist (WEBHOOK_ALLOWED_URLS) is checked on the URL the
 * tenant gave, and a redirect could point anywhere. A URL the allowlist no longer covers fails
 * the delivery without a request.
 *
 * Woken by ear_webhook (the outbox trigger and the retry route notify it) and by a finished
 * attempt; otherwise it sleeps until the next retry is due, at most `pollMs` (HOST_WEBHOOK_POLL_MS),
 * or HOST_IDLE_MS while the fleet is idle (lifecycle/timed-loop.ts).
 */

import { Gauge, type Registry } from "prom-client";
import { WEBHOOK_LIMITS, type WebhookPayload } from "../../src/contracts/webhook";
import type { Db } from "../../src/db/client";
import { toJobView } from "../../src/db/job-view";
import { getJob } from "../../src/db/jobs-repo";
import {
  type AttemptResult,
  type ClaimedDelivery,
  claimDeliveries,
  droppedDeliveriesByTenant,
  recordAttempt,
} from "../../src/db/webhooks-repo";
import { backoffDelay } from "../../src/domain/backoff";
import { type AllowedUrl, isUrlAllowed } from "../../src/domain/mcp";
import { webhookHeaders } from "../../src/domain/webhook-signature";
import type { FleetActivity } from "../lifecycle/activity";
import type { Service } from "../lifecycle/service";
import { TimedLoop } from "../lifecycle/timed-loop";
import { errorFields, type Logger } from "../log";

export interface WebhookSenderOptions {
  db: Db;
  log: Logger;
  allowedUrls: readonly AllowedUrl[];
  /** Attempts in flight on this host at once. */
  concurrency: number;
  /** The longest sleep while the fleet is busy (it sleeps until the next retry is due). */
  pollMs: number;
  activity?: FleetActivity;
  /** One attempt's timeout (WEBHOOK_LIMITS.attemptTimeoutMs unless a test shortens it). */
  attemptTimeoutMs: number;
  fetch?: typeof fetch;
  /** Each attempt's outcome, as recorded (metrics, tests). */
  onAttempt?: (d: ClaimedDelivery, r: AttemptResult) => void;
}

/** Per-tenant series of the dropped-deliveries gauge: the tenants with the most (every host repeats them). */
const DROPPED_SERIES = 20;

/**
 * `webhook_deliveries_dropped{tenant}`: deliveries the outbox recorded `dropped` because their
 * tenant had WEBHOOK_LIMITS.maxPendingPerTenant pending (global, from Postgres, read at each
 * scrape: one small statement over the endpoints; read max across hosts). A failed read leaves
 * the series out rather than failing the scrape.
 */
export function registerWebhookMetrics(
  registry: Registry,
  db: Db,
  log: Logger,
  /** While this holds (a sleeping host) a scrape keeps the last values and sends no statement. */
  skip: () => boolean = () => false,
): void {
  new Gauge({
    name: "webhook_deliveries_dropped",
    help: `Webhook deliveries dropped because the tenant was at its pending cap (${WEBHOOK_LIMITS.maxPendingPerTenant}), per tenant, for the ${DROPPED_SERIES} tenants with the most (global; read max across hosts)`,
    labelNames: ["tenant"] as const,
    registers: [registry],
    async collect() {
      if (skip()) return;
      this.reset();
      try {
        for (const r of await droppedDeliveriesByTenant(db, DROPPED_SERIES))
          this.set({ tenant: r.tenantId }, r.dropped);
      } catch (err) {
        log.warn("dropped webhook deliveries not read", errorFields(err));
      }
    },
  });
}

/** Adds `by` to a key's count; a count that reaches 0 is removed (the claim reads the map as it is). */
function count(map: Map<string, number>, key: string, by: number): void {
  const n = (map.get(key) ?? 0) + by;
  if (n <= 0) map.delete(key);
  else map.set(key, n);
}

/** A lease outlasts the attempt's timeout by this, so a slow result write is not taken for a dead sender. */
const LEASE_MARGIN_MS = 5_000;

export class WebhookSender implements Service {
  readonly name = "webhook sender";
  private readonly loop: TimedLoop;
  private readonly inFlight = new Map<string, Promise<void>>();
  /** In-flight attempts per endpoint (webhook id). */
  private readonly perEndpoint = new Map<string, number>();
  /** In-flight attempts per tenant. */
  private readonly perTenant = new Map<string, number>();
  private readonly fetchImpl: typeof fetch;

  constructor(private readonly opts: WebhookSenderOptions) {
    this.fetchImpl = opts.fetch ?? fetch;
    const activity = opts.activity;
    this.loop = new TimedLoop(
      {
        name: this.name,
        busyMs: opts.pollMs,
        idle: activity ? { everyMs: activity.idleMs, when: () => activity.idle } : undefined,
        onError: (err) => opts.log.warn("webhook pass failed", errorFields(err)),
      },
      () => this.pass(),
    );
  }

  start(): void {
    this.loop.start();
  }

  /**
   * A delivery was queued or made due (ear_webhook), or a slot came free: claim now. Wakes while
   * a pass runs coalesce into one more pass after it.
   */
  wake(): void {
    this.loop.wake();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
    // Attempts in flight end by their timeout; their leases cover them if the process dies first.
    await Promise.allSettled([...this.inFlight.values()]);
  }

  /** Claims what this host has room for; returns how long until the next row is due. */
  private async pass(): Promise<number | null> {
    // Asleep (lifecycle/sleep.ts): the sleep ends by the next due attempt (the look read it) and wakes this loop.
    if (this.opts.activity?.asleep) return null;
    const free = this.opts.concurrency - this.inFlight.size;
    // Full: a finishing attempt wakes the loop.
    if (free <= 0) return null;
    const { claimed, nextInMs } = await claimDeliveries(this.opts.db, {
      free,
      concurrency: this.opts.concurrency,
      shareAlone: WEBHOOK_LIMITS.tenantShareAlone,
      perEndpoint: WEBHOOK_LIMITS.perEndpointInFlight,
      failingAfter: WEBHOOK_LIMITS.pauseAfterFailures,
      busy: Object.fromEntries(this.perEndpoint),
      busyTenants: Object.fromEntries(this.perTenant),
      leaseMs: this.opts.attemptTimeoutMs + LEASE_MARGIN_MS,
    });
    for (const d of claimed) {
      count(this.perEndpoint, d.webhookId, 1);
      count(this.perTenant, d.tenantId, 1);
      const run = this.attempt(d).finally(() => {
        this.inFlight.delete(d.id);
        count(this.perEndpoint, d.webhookId, -1);
        count(this.perTenant, d.tenantId, -1);
        // A slot (and maybe this endpoint's or tenant's share) is free: more may be due.
        this.wake();
      });
      this.inFlight.set(d.id, run);
    }
    return nextInMs;
  }

  private async attempt(d: ClaimedDelivery): Promise<void> {
    let result: AttemptResult;
    try {
      const payload = d.payload ?? (await this.payloadOf(d));
      result = await this.send(d, payload);
    } catch (err) {
      this.opts.log.warn("webhook attempt could not be made", { delivery_id: d.id, ...errorFields(err) });
      result = this.outcome(d, null, err instanceof Error ? err.message : String(err), 0, d.payload);
    }
    try {
      await recordAttempt(this.opts.db, d, result);
      this.opts.onAttempt?.(d, result);
    } catch (err) {
      // The lease runs out and another attempt is made: at least once.
      this.opts.log.warn("webhook attempt result not recorded", { delivery_id: d.id, ...errorFields(err) });
    }
  }

  /** The Standard Webhooks body: the job as GET /v1/jobs/{id} shows it, built once. */
  private async payloadOf(d: ClaimedDelivery): Promise<string> {
    const row = await getJob(this.opts.db, d.tenantId, d.jobId);
    const payload: WebhookPayload = {
      type: d.eventType,
      timestamp: d.createdAt.toISOString(),
      data: { job: row ? toJobView(row) : { id: d.jobId } },
    };
    return JSON.stringify(payload);
  }

  private async send(d: ClaimedDelivery, body: string): Promise<AttemptResult> {
    if (!isUrlAllowed(d.url, this.opts.allowedUrls)) {
      return {
        ...this.outcome(d, null, "url not allowed by this host's WEBHOOK_ALLOWED_URLS", 0, body),
        retryInMs: null,
      };
    }
    const started = performance.now();
    try {
      const res = await this.fetchImpl(d.url, {
        method: "POST",
        redirect: "manual",
        headers: { "content-type": "application/json", ...(await webhookHeaders(d.secret, d.id, body)) },
        body,
        signal: AbortSignal.timeout(this.opts.attemptTimeoutMs),
      });
      // The body is not read beyond what closing it takes: only the status counts.
      await res.body?.cancel().catch(() => {});
      const ms = performance.now() - started;
      const redirect = res.status >= 300 && res.status < 400 ? "redirect not followed" : null;
      return this.outcome(d, res.status, redirect, ms, body);
    } catch (err) {
      const ms = performance.now() - started;
      const timedOut = err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError");
      const message = timedOut
        ? `no answer within ${this.opts.attemptTimeoutMs} ms`
        : err instanceof Error
          ? err.cause instanceof Error
            ? err.cause.message
            : err.message
          : String(err);
      return this.outcome(d, null, message, ms, body);
    }
  }

  private outcome(
    d: ClaimedDelivery,
    status: number | null,
    error: string | null,
    durationMs: number,
    payload: string | null,
  ): AttemptResult {
    const delivered = status !== null && status >= 200 && status < 300;
    const retryInMs = delivered
      ? null
      : backoffDelay(d.attempt - 1, { baseMs: WEBHOOK_LIMITS.retryBaseMs, maxMs: WEBHOOK_LIMITS.retryMaxDelayMs });
    const tooLate = Date.now() + (retryInMs ?? 0) - d.createdAt.getTime() > WEBHOOK_LIMITS.retryForMs;
    return {
      statusCode: status,
      error: error ?? (delivered ? null : `HTTP ${status}`),
      durationMs,
      delivered,
      retryInMs: delivered || tooLate ? null : retryInMs,
      payload,
    };
  }
}

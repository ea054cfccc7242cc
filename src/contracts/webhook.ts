/**
 * Webhooks (docs/api.md "Webhooks"): a tenant's endpoints, told of job events per the Standard
 * Webhooks spec (https://www.standardwebhooks.com: `webhook-id`, `webhook-timestamp`,
 * `webhook-signature` v1, HMAC-SHA256 with the endpoint's `whsec_` secret). The deliveries are an
 * outbox in Postgres (drizzle/0016), sent by the hosts (sandbox-host/webhooks/webhook-sender.ts).
 */
import { z } from "zod";
import { httpUrl } from "./http-url";
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from "./webhook-events";

export { WEBHOOK_EVENT_TYPES, type WebhookEventType };

export const WEBHOOK_LIMITS = {
  /** Endpoints one tenant may have (each is a lookup in every state change of its jobs). */
  maxWebhooksPerTenant: 20,
  maxUrlChars: 2000,
  /** One attempt's timeout: no answer by then is a failed attempt, retried. */
  attemptTimeoutMs: 10_000,
  /** Retries stop this long after the event; the delivery is then `failed`. */
  retryForMs: 24 * 3_600_000,
  /** Backoff: attempt n (from 1) waits a random time below min(maxDelay, base × 2^(n-1)): the first ≤ 2 s. */
  retryBaseMs: 2_000,
  retryMaxDelayMs: 3_600_000,
  /** Attempts one host has in flight to one endpoint at once: a slow endpoint holds no more of its slots. */
  perEndpointInFlight: 2,
  /**
   * The most of a host's HOST_WEBHOOK_CONCURRENCY slots one tenant's attempts may hold, even with
   * no other tenant's work due: the rest stay free, so another tenant's first delivery is claimed
   * at once instead of after one of the first tenant's attempts ends (up to the attempt timeout).
   * With n tenants' work due or in flight, each may hold concurrency / n (at least 1), and the
   * claim takes their rows in turn (each tenant's oldest, then each one's second oldest, …).
   */
  tenantShareAlone: 0.75,
  /**
   * An endpoint whose attempts failed this many times in a row (non-2xx, redirect, connection
   * error, no answer in time) is paused: no attempt is claimed for it until `paused_until`, and
   * then it gets one attempt at a time per host until one succeeds. So an endpoint that keeps
   * timing out stops holding slots, and its deliveries wait (pending, not failed) for it.
   */
  pauseAfterFailures: 5,
  /** The first pause; each following one (the probe after a pause failed too) doubles it, up to pauseMaxMs. */
  pauseBaseMs: 30_000,
  pauseMaxMs: 3_600_000,
  /**
   * Deliveries one tenant may have pending. Past it the outbox trigger records a new delivery
   * `dropped` (never sent unless retried) and counts it on the endpoint: one tenant's backlog
   * cannot grow the outbox without bound, and nothing is lost silently. The number is also in
   * the trigger (drizzle/0019_webhook_fairness.sql); test/integration/webhook-fairness.test.ts
   * fills a tenant to this number and sees the next one dropped.
   */
  maxPendingPerTenant: 10_000,
  maxListLimit: 100,
  defaultListLimit: 20,
} as const;

export const CreateWebhookBodySchema = z
  .object({
    url: httpUrl(WEBHOOK_LIMITS.maxUrlChars),
    events: z
      .array(z.enum(WEBHOOK_EVENT_TYPES))
      .min(1)
      .max(WEBHOOK_EVENT_TYPES.length)
      .refine((e) => new Set(e).size === e.length, { message: "must not repeat an event" }),
    enabled: z.boolean().optional(),
  })
  .strict();
export type CreateWebhookBody = z.infer<typeof CreateWebhookBodySchema>;

const isoTime = z.iso.datetime();

export const WebhookViewSchema = z.object({
  id: z.uuid(),
  url: z.string(),
  events: z.array(z.enum(WEBHOOK_EVENT_TYPES)),
  enabled: z.boolean(),
  created_at: isoTime,
  /** Attempts in a row that failed; a delivered one resets it. */
  consecutive_failures: z.number().int().min(0),
  /** While the endpoint is paused (it kept failing), when attempts resume; null when not paused. */
  paused_until: isoTime.nullable(),
  /** Why it is paused, or still probed one attempt at a time after a pause; null when healthy. */
  pause_reason: z.string().nullable(),
  /** Deliveries recorded `dropped` because the tenant had WEBHOOK_LIMITS.maxPendingPerTenant pending. */
  dropped_deliveries: z.number().int().min(0),
});
export type WebhookView = z.infer<typeof WebhookViewSchema>;

/** POST /v1/webhooks: the endpoint with its signing secret, shown this once. */
export const WebhookCreatedSchema = z.object({
  webhook: WebhookViewSchema.extend({ secret: z.string().regex(/^whsec_/) }),
});
export const WebhookAnswerSchema = z.object({ webhook: WebhookViewSchema });
export const WebhookPageSchema = z.object({ webhooks: z.array(WebhookViewSchema) });

export const DELIVERY_STATES = ["pending", "delivered", "failed", "dropped"] as const;

export const DeliveryAttemptSchema = z.object({
  attempted_at: isoTime,
  /** The endpoint's HTTP status; null when no answer came (timeout, connection error). */
  status_code: z.number().int().nullable(),
  error: z.string().nullable(),
  duration_ms: z.number().int().min(0),
});

export const DeliveryViewSchema = z.object({
  /** The `webhook-id` header of every attempt. */
  id: z.uuid(),
  webhook_id: z.uuid(),
  job_id: z.uuid(),
  event_type: z.enum(WEBHOOK_EVENT_TYPES),
  state: z.enum(DELIVERY_STATES),
  /** When the next attempt is due (pending only). */
  next_attempt_at: isoTime.nullable(),
  created_at: isoTime,
  finished_at: isoTime.nullable(),
  attempts: z.array(DeliveryAttemptSchema),
});
export type DeliveryView = z.infer<typeof DeliveryViewSchema>;

export const DeliveryPageSchema = z.object({ deliveries: z.array(DeliveryViewSchema) });
export const DeliveryAnswerSchema = z.object({ delivery: DeliveryViewSchema });

export const ListDeliveriesQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(WEBHOOK_LIMITS.maxListLimit).default(WEBHOOK_LIMITS.defaultListLimit),
});

/** What an endpoint receives: the Standard Webhooks body. */
export interface WebhookPayload {
  type: WebhookEventType;
  /** When the event happened (the job's state change), ISO 8601. */
  timestamp: string;
  data: { job: unknown };
}

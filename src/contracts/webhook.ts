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
});
export type WebhookView = z.infer<typeof WebhookViewSchema>;

/** POST /v1/webhooks: the endpoint with its signing secret, shown this once. */
export const WebhookCreatedSchema = z.object({
  webhook: WebhookViewSchema.extend({ secret: z.string().regex(/^whsec_/) }),
});
export const WebhookAnswerSchema = z.object({ webhook: WebhookViewSchema });
export const WebhookPageSchema = z.object({ webhooks: z.array(WebhookViewSchema) });

export const DELIVERY_STATES = ["pending", "delivered", "failed"] as const;

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

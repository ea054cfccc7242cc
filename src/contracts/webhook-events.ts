/**
 * The events a webhook endpoint may subscribe to: `job.<state>` for each state a job can be told
 * of in. Its own module, without zod, so the console (which may not load zod) can list them.
 */
export const WEBHOOK_EVENT_TYPES = [
  "job.completed",
  "job.failed",
  "job.cancelled",
  "job.lost",
  "job.timed_out",
  "job.expired",
  "job.waiting",
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

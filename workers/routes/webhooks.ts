/**
 * Webhooks (docs/api.md "Webhooks"): a tenant's endpoints, their deliveries and a manual retry.
 * The gateway stores endpoints (the URL must be under WEBHOOK_ALLOWED_URLS: a tenant writes it
 * and the hosts, inside the operator's network, call it) and shows the secret once; deliveries
 * are queued by the outbox trigger and sent by the hosts (sandbox-host/webhooks/webhook-sender.ts).
 */
import { ApiError } from "../../src/contracts/errors";
import { BODY_ERRORS, deliveryIdParam, V1_ERRORS, webhookIdParam } from "../../src/contracts/openapi";
import {
  CreateWebhookBodySchema,
  DeliveryAnswerSchema,
  DeliveryPageSchema,
  ListDeliveriesQuerySchema,
  WEBHOOK_LIMITS,
  WebhookAnswerSchema,
  WebhookCreatedSchema,
  WebhookPageSchema,
} from "../../src/contracts/webhook";
import {
  createWebhook,
  deleteWebhook,
  getWebhook,
  listDeliveries,
  listWebhooks,
  retryDelivery,
} from "../../src/db/webhooks-repo";
import { isUrlAllowed } from "../../src/domain/mcp";
import { newWebhookSecret } from "../../src/domain/webhook-signature";
import { wakeSleepers } from "../commands/redis-accelerator";
import { callDependency } from "../deps";
import { route, routes } from "./route";

const notFound = () => new ApiError("not_found", "webhook not found");

export const webhookRoutes = routes(
  route({
    method: "post",
    path: "/",
    operationId: "createWebhook",
    tag: "webhooks",
    summary: "Add an endpoint told of job events; its signing secret is shown this once",
    description:
      "`url` must be an http(s) URL without credentials, whose percent-decoded, dot-normalised path is under one of the operator's WEBHOOK_ALLOWED_URLS prefixes (400 `invalid_request` otherwise; with none set, every URL is refused). `events` among job.completed, job.failed, job.cancelled, job.lost, job.timed_out, job.expired, job.waiting. Deliveries follow the Standard Webhooks spec, signed with `secret` (`whsec_…`), which no later answer shows.",
    auth: "bearer",
    body: CreateWebhookBodySchema,
    responses: [{ status: 201, description: "The endpoint, with `secret`.", schema: WebhookCreatedSchema }],
    errors: [...BODY_ERRORS, "conflict", ...V1_ERRORS],
    handler: async (c, input) => {
      const body = await input.body();
      const allowed = c.get("config").webhookAllowedUrls;
      // The body schema made it an http(s) URL without credentials; where it may point is the
      // operator's list, compared on the decoded, normalised path (src/domain/mcp.ts).
      if (!isUrlAllowed(body.url, allowed)) {
        throw new ApiError(
          "invalid_request",
          allowed.length === 0
            ? "url: webhooks are off (the operator allows no URL: WEBHOOK_ALLOWED_URLS)"
            : "url: not under any of the operator's allowed webhook URLs (WEBHOOK_ALLOWED_URLS)",
        );
      }
      const secret = newWebhookSecret();
      const db = c.get("deps").db();
      const created = await callDependency("postgres", () =>
        createWebhook(
          db,
          c.get("tenantId"),
          { url: body.url, events: body.events, enabled: body.enabled ?? true, secret },
          WEBHOOK_LIMITS.maxWebhooksPerTenant,
        ),
      );
      if (!created) {
        throw new ApiError(
          "conflict",
          `this tenant already has ${WEBHOOK_LIMITS.maxWebhooksPerTenant} webhooks (the limit); delete one first`,
        );
      }
      return c.json({ webhook: { ...created, secret } }, 201);
    },
  }),
  route({
    method: "get",
    path: "/",
    operationId: "listWebhooks",
    tag: "webhooks",
    summary: "The tenant's webhook endpoints, oldest first (no secrets)",
    auth: "bearer",
    responses: [{ status: 200, description: "Every endpoint (at most 20).", schema: WebhookPageSchema }],
    errors: [...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const webhooks = await callDependency("postgres", () => listWebhooks(db, c.get("tenantId")));
      return c.json({ webhooks });
    },
  }),
  route({
    method: "get",
    path: "/:id",
    operationId: "getWebhook",
    tag: "webhooks",
    summary: "One webhook endpoint (no secret)",
    auth: "bearer",
    parameters: [webhookIdParam],
    responses: [{ status: 200, description: "The endpoint.", schema: WebhookAnswerSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const found = await callDependency("postgres", () => getWebhook(db, c.get("tenantId"), c.req.param("id")));
      if (!found) throw notFound();
      return c.json({ webhook: found });
    },
  }),
  route({
    method: "delete",
    path: "/:id",
    operationId: "deleteWebhook",
    tag: "webhooks",
    summary: "Delete an endpoint and its deliveries (nothing more is sent to it)",
    auth: "bearer",
    parameters: [webhookIdParam],
    responses: [{ status: 204, description: "Deleted." }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const deleted = await callDependency("postgres", () => deleteWebhook(db, c.get("tenantId"), c.req.param("id")));
      if (!deleted) throw notFound();
      return c.body(null, 204);
    },
  }),
  route({
    method: "get",
    path: "/:id/deliveries",
    operationId: "listWebhookDeliveries",
    tag: "webhooks",
    summary: "The endpoint's deliveries, newest first, each with its attempts",
    description:
      "Each attempt: when, the endpoint's status code (null when no answer came), the error, how long it took.",
    auth: "bearer",
    parameters: [webhookIdParam],
    query: ListDeliveriesQuerySchema,
    responses: [{ status: 200, description: "The newest `limit` deliveries.", schema: DeliveryPageSchema }],
    errors: ["invalid_request", "not_found", ...V1_ERRORS],
    handler: async (c, input) => {
      const { limit } = input.query();
      const db = c.get("deps").db();
      const deliveries = await callDependency("postgres", () =>
        listDeliveries(db, c.get("tenantId"), c.req.param("id"), limit),
      );
      if (!deliveries) throw notFound();
      return c.json({ deliveries });
    },
  }),
  route({
    method: "post",
    path: "/:id/deliveries/:delivery_id/retry",
    operationId: "retryWebhookDelivery",
    tag: "webhooks",
    summary: "Send a delivery again now, under the same webhook-id (no body)",
    description:
      "Any state: a failed one gets one more attempt (and its backoff retries while within 24 h of the event), a delivered one is sent again.",
    auth: "bearer",
    parameters: [webhookIdParam, deliveryIdParam],
    responses: [{ status: 202, description: "The delivery, due now.", schema: DeliveryAnswerSchema }],
    errors: ["not_found", ...V1_ERRORS],
    handler: async (c) => {
      const db = c.get("deps").db();
      const delivery = await callDependency("postgres", () =>
        retryDelivery(db, c.get("tenantId"), c.req.param("id"), c.req.param("delivery_id")),
      );
      if (!delivery) throw new ApiError("not_found", "delivery not found");
      // Due now: a sleeping fleet's hosts know only the delivery's old next attempt.
      wakeSleepers(c.get("deps"), (work) => c.executionCtx.waitUntil(work));
      return c.json({ delivery }, 202);
    },
  }),
);

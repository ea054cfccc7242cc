/**
 * The gateway's Hono app: auth, validation and routing only; it never executes agents.
 * /healthz, /readyz and /openapi.json need no key; /internal/* is HMAC-signed by hosts; /v1/* needs an
 * API key or an access token, after CORS (so a browser's preflight needs neither) and before the rate limit.
 */
import { Hono } from "hono";
import { authenticate } from "./middleware/auth/auth";
import { corsForAllowedOrigins } from "./middleware/cors/cors";
import { handleError, handleNotFound } from "./middleware/error-handler/error-handler";
import { rateLimit } from "./middleware/rate-limit/rate-limit";
import { serverTiming } from "./middleware/server-timing/server-timing";
import { withConfig } from "./middleware/with-config/with-config";
import { agentRoutes } from "./routes/agents";
import { modelRoutes, toolRoutes, usageRoutes } from "./routes/catalog";
import { conversationRoutes } from "./routes/conversations";
import { evalRoutes } from "./routes/evals";
import { healthRoutes } from "./routes/health";
import { internalBlobRoutes } from "./routes/internal-blobs";
import { internalEventRoutes } from "./routes/internal-events";
import { jobArtifactRoutes } from "./routes/job-artifacts";
import { jobControlRoutes } from "./routes/job-control";
import { jobEventRoutes } from "./routes/job-events";
import { jobForkRoutes } from "./routes/job-fork";
import { jobRoutes } from "./routes/jobs";
import { openApiRoutes } from "./routes/openapi";
import { replayRoutes } from "./routes/replays";
import { scheduleRoutes } from "./routes/schedules";
import { tokenRoutes } from "./routes/tokens";
import { webhookRoutes } from "./routes/webhooks";
import type { GatewayEnv } from "./types";

export function createApp() {
  const app = new Hono<GatewayEnv>();
  app.onError(handleError);
  app.notFound(handleNotFound);

  app.route("/", healthRoutes);
  app.route("/", openApiRoutes(app));

  app.use("/internal/*", withConfig());
  app.route("/", internalEventRoutes);
  app.route("/", internalBlobRoutes);

  app.use("/v1/*", serverTiming(), withConfig(), corsForAllowedOrigins(), authenticate(), rateLimit());
  app.route("/v1/tokens", tokenRoutes);
  app.route("/v1/jobs", jobEventRoutes);
  app.route("/v1/jobs", jobRoutes);
  app.route("/v1/conversations", conversationRoutes);
  app.route("/v1/jobs", jobControlRoutes);
  app.route("/v1/jobs", jobForkRoutes);
  app.route("/v1/jobs", jobArtifactRoutes);
  app.route("/v1/replays", replayRoutes);
  app.route("/v1/evals", evalRoutes);
  app.route("/v1/agents", agentRoutes);
  app.route("/v1/schedules", scheduleRoutes);
  app.route("/v1/webhooks", webhookRoutes);
  app.route("/v1/models", modelRoutes);
  app.route("/v1/tools", toolRoutes);
  app.route("/v1/usage", usageRoutes);
  return app;
}

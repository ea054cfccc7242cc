/**
 * POST /v1/tokens — mint an access token (docs/api.md, "Tokens") for the API key's tenant. The
 * auth middleware has already refused a token here (a token cannot mint tokens), so the caller
 * holds an API key; no database work: the answer is signed, not stored.
 */
import { Hono } from "hono";
import { ApiError } from "../../src/contracts/errors";
import { CreateTokenBodySchema } from "../../src/contracts/tokens";
import { mintToken } from "../middleware/auth/access-tokens";
import { readJsonBody } from "../request/body";
import type { GatewayEnv } from "../types";

export const tokenRoutes = new Hono<GatewayEnv>().post("/", async (c) => {
  // Belt and braces: the middleware's rule already answered 403 for a token.
  if (c.get("access").kind !== "api_key") throw new ApiError("forbidden", "a token cannot mint tokens");
  const config = c.get("config");
  const body = await readJsonBody(c.req.raw, CreateTokenBodySchema, config.maxBodyBytes);
  const answer = await mintToken(config, {
    tenantId: c.get("tenantId"),
    keyHash: c.get("apiKeyHash"),
    scope: body.scope,
    ttlS: body.ttl_s,
    jobId: body.job_id,
    conversationId: body.conversation_id,
  });
  return c.json(answer, 201);
});

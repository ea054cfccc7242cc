/**
 * POST /v1/tokens — mint an access token (docs/api.md, "Tokens") for the API key's tenant. The
 * auth middleware has already refused a token here (a token cannot mint tokens), so the caller
 * holds an API key; no database work: the answer is signed, not stored.
 */
import { ApiError } from "../../src/contracts/errors";
import { BODY_ERRORS, V1_ERRORS } from "../../src/contracts/openapi";
import { CreateTokenBodySchema, TokenAnswerSchema } from "../../src/contracts/tokens";
import { mintToken } from "../middleware/auth/access-tokens";
import { route, routes } from "./route";

export const tokenRoutes = routes(
  route({
    method: "post",
    path: "/",
    operationId: "createToken",
    tag: "tokens",
    summary: "Mint a short-lived access token for a browser",
    description:
      "Needs an API key (a token cannot mint tokens: 403). The token is bound to the key's tenant, expires after `ttl_s`, has scope `read` (GET only) or `write`, and is optionally bound to one job or one conversation. It works as `Authorization: Bearer` on every /v1 route it covers, and as `access_token` on the SSE and WebSocket routes. Its requests count against the minting key's rate limit.",
    auth: "api_key",
    body: CreateTokenBodySchema,
    responses: [{ status: 201, description: "The token.", schema: TokenAnswerSchema }],
    errors: [...BODY_ERRORS, ...V1_ERRORS],
    handler: async (c, input) => {
      // Belt and braces: the middleware's rule already answered 403 for a token.
      if (c.get("access").kind !== "api_key") throw new ApiError("forbidden", "a token cannot mint tokens");
      const config = c.get("config");
      const body = await input.body();
      const answer = await mintToken(config, {
        tenantId: c.get("tenantId"),
        keyHash: c.get("apiKeyHash"),
        scope: body.scope,
        ttlS: body.ttl_s,
        jobId: body.job_id,
        conversationId: body.conversation_id,
      });
      return c.json(answer, 201);
    },
  }),
);

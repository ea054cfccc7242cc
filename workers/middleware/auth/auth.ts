/**
 * Authentication for /v1: an API key or an access token (access-tokens.ts), each as
 * `Authorization: Bearer <credential>`; and a token, only a token, as `?access_token=` on the two
 * routes a browser cannot send a header to: the event stream (EventSource) and the chat WebSocket.
 *
 * No API key is ever accepted in a URL: URLs end up in proxy and access logs and browser
 * history, and a key does not expire. A credential in a URL where it is not accepted is refused,
 * not ignored, so a client sending one learns it at once. Malformed keys are refused without a
 * database query; unknown and revoked keys look the same to the caller (401). What a token may
 * do is checked here for every route (tokenAllows: 403 `forbidden`), and so is the key that
 * minted it (the token's `kh`), through the same 5 s key → tenant cache as an API key: a revoked
 * key's tokens stop working when its key does, within 5 s, not at their expiry up to 24 h later.
 * The price is the key's lookup, at most once per key per isolate per 5 s, shared with the key's
 * own requests; a token no longer works while Postgres is unreachable and the cache is cold.
 */
import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import { ACCESS_TOKEN_PARAM, looksLikeAccessToken } from "../../../src/contracts/access";
import { ApiError } from "../../../src/contracts/errors";
import { findTenantIdByKeyHash } from "../../../src/db/jobs-repo";
import { hashApiKey, looksLikeApiKey } from "../../../src/domain/api-keys";
import { callDependency } from "../../deps";
import type { GatewayEnv } from "../../types";
import { tokenAllows, verifyToken } from "./access-tokens";
import { resolveTenant } from "./tenant-cache";

/** The routes that may carry a token in their URL: GET /v1/jobs/:id/events and GET /v1/conversations/:id/ws. */
const URL_TOKEN_ROUTES = [/^\/v1\/jobs\/[^/]+\/events$/, /^\/v1\/conversations\/[^/]+\/ws$/];
/** The parameter that carried an API key on the WebSocket route before tokens existed; refused everywhere now. */
const RETIRED_KEY_PARAM = "token";

function presentedCredential(req: Request): string | null {
  const url = new URL(req.url);
  if (url.searchParams.has(RETIRED_KEY_PARAM)) {
    throw new ApiError(
      "unauthorized",
      "an API key is never accepted in a URL (?token=): mint a token with POST /v1/tokens and pass it as ?access_token=, or send Authorization: Bearer <key>",
    );
  }
  const fromUrl = url.searchParams.get(ACCESS_TOKEN_PARAM);
  if (fromUrl !== null) {
    if (req.method !== "GET" || !URL_TOKEN_ROUTES.some((re) => re.test(url.pathname))) {
      throw new ApiError(
        "unauthorized",
        `?${ACCESS_TOKEN_PARAM}= is accepted only on the event stream and the chat WebSocket; send Authorization: Bearer <token>`,
      );
    }
    if (!looksLikeAccessToken(fromUrl)) {
      throw new ApiError(
        "unauthorized",
        `?${ACCESS_TOKEN_PARAM}= takes a token from POST /v1/tokens; an API key is never accepted in a URL`,
      );
    }
  }
  const header = req.headers.get("authorization");
  if (header !== null) return /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] ?? "";
  return fromUrl;
}

/** The tenant of the live (unrevoked) key with this hash, through the 5 s cache; null if none. */
function keyTenant(c: Context<GatewayEnv>, keyHash: string): Promise<string | null> {
  return resolveTenant(
    keyHash,
    () => callDependency("postgres", () => findTenantIdByKeyHash(c.get("deps").db(), keyHash)),
    { keepAlive: (work) => c.executionCtx.waitUntil(work) },
  );
}

export function authenticate() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    const credential = presentedCredential(c.req.raw);
    if (credential === null) {
      throw new ApiError("unauthorized", "missing credential: send Authorization: Bearer <API key or token>");
    }
    if (looksLikeAccessToken(credential)) {
      const grant = await verifyToken(c.get("config"), credential);
      if (grant === null) throw new ApiError("unauthorized", "invalid or expired token");
      const upgrade = c.req.header("upgrade")?.toLowerCase() === "websocket";
      const refusal = tokenAllows(grant, c.req.method, c.req.path, upgrade);
      if (refusal !== null) throw new ApiError("forbidden", refusal);
      if ((await keyTenant(c, grant.keyHash)) !== grant.tenantId) {
        throw new ApiError("unauthorized", "the API key that minted this token is revoked");
      }
      c.set("tenantId", grant.tenantId);
      c.set("apiKeyHash", grant.keyHash);
      c.set("access", { kind: "token", grant });
      return next();
    }
    if (!looksLikeApiKey(credential)) throw new ApiError("unauthorized", "invalid API key");
    const keyHash = await hashApiKey(credential);
    const tenantId = await keyTenant(c, keyHash);
    if (tenantId === null) throw new ApiError("unauthorized", "invalid API key");
    c.set("tenantId", tenantId);
    c.set("apiKeyHash", keyHash);
    c.set("access", { kind: "api_key" });
    await next();
  });
}

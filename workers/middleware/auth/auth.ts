/**
 * API-key authentication for /v1: `Authorization: Bearer <key>`, or `?token=<key>` on the chat
 * WebSocket upgrade only (browsers cannot set headers there). A key anywhere else in a URL is
 * refused, not ignored: URLs end up in proxy and access logs, so a client sending one should
 * learn it at once. Malformed keys are refused without a database query; unknown and revoked
 * keys look the same to the caller (401).
 */
import { createMiddleware } from "hono/factory";
import { ApiError } from "../../../src/contracts/errors";
import { findTenantIdByKeyHash } from "../../../src/db/jobs-repo";
import { hashApiKey, looksLikeApiKey } from "../../../src/domain/api-keys";
import { callDependency } from "../../deps";
import type { GatewayEnv } from "../../types";
import { resolveTenant } from "./tenant-cache";

/** The one route that may carry a credential in its URL: GET /v1/conversations/:id/ws. */
const URL_CREDENTIAL_ROUTE = /^\/v1\/conversations\/[^/]+\/ws$/;
const URL_CREDENTIAL_PARAM = "token";

/** Where a request's credential came from; each source is one small function, tried in order. */
type CredentialSource = (req: Request, url: URL) => string | null;

const bearerHeader: CredentialSource = (req) => {
  const header = req.headers.get("authorization");
  if (header === null) return null;
  return /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] ?? "";
};

const webSocketUrlToken: CredentialSource = (req, url) => {
  if (!URL_CREDENTIAL_ROUTE.test(url.pathname)) return null;
  if (req.headers.get("upgrade")?.toLowerCase() !== "websocket") return null;
  return url.searchParams.get(URL_CREDENTIAL_PARAM);
};

const CREDENTIAL_SOURCES: readonly CredentialSource[] = [bearerHeader, webSocketUrlToken];

function presentedKey(req: Request): string | null {
  const url = new URL(req.url);
  if (url.searchParams.has(URL_CREDENTIAL_PARAM) && !URL_CREDENTIAL_ROUTE.test(url.pathname)) {
    throw new ApiError(
      "unauthorized",
      "an API key in the URL (?token=) is accepted only on the WebSocket route; send Authorization: Bearer <key>",
    );
  }
  for (const source of CREDENTIAL_SOURCES) {
    const key = source(req, url);
    if (key !== null) return key;
  }
  return null;
}

export function apiKeyAuth() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    const key = presentedKey(c.req.raw);
    if (key === null) throw new ApiError("unauthorized", "missing API key: send Authorization: Bearer <key>");
    if (!looksLikeApiKey(key)) throw new ApiError("unauthorized", "invalid API key");
    const keyHash = await hashApiKey(key);
    const tenantId = await resolveTenant(
      keyHash,
      () => callDependency("postgres", () => findTenantIdByKeyHash(c.get("deps").db(), keyHash)),
      { keepAlive: (work) => c.executionCtx.waitUntil(work) },
    );
    if (tenantId === null) throw new ApiError("unauthorized", "invalid API key");
    c.set("tenantId", tenantId);
    c.set("apiKeyHash", keyHash);
    await next();
  });
}

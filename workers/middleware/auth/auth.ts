/**
 * API-key authentication for /v1: `Authorization: Bearer <key>`, or `?token=<key>` on a
 * WebSocket upgrade (browsers cannot set headers there). Malformed keys are refused without a
 * database query; unknown and revoked keys look the same to the caller (401).
 */
import { createMiddleware } from "hono/factory";
import { ApiError } from "../../../src/contracts";
import { findTenantIdByKeyHash } from "../../../src/db";
import { hashApiKey, looksLikeApiKey } from "../../../src/domain";
import { callDependency } from "../../deps";
import type { GatewayEnv } from "../../types";
import { cachedTenant, rememberTenant } from "./tenant-cache";

function presentedKey(req: Request): string | null {
  const header = req.headers.get("authorization");
  if (header !== null) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    return match?.[1] ?? null;
  }
  if (req.headers.get("upgrade")?.toLowerCase() === "websocket") {
    return new URL(req.url).searchParams.get("token");
  }
  return null;
}

export function apiKeyAuth() {
  return createMiddleware<GatewayEnv>(async (c, next) => {
    const key = presentedKey(c.req.raw);
    if (key === null) throw new ApiError("unauthorized", "missing API key: send Authorization: Bearer <key>");
    if (!looksLikeApiKey(key)) throw new ApiError("unauthorized", "invalid API key");
    const keyHash = await hashApiKey(key);
    let tenantId = cachedTenant(keyHash);
    if (tenantId === null) {
      const db = c.get("deps").db();
      tenantId = await callDependency("postgres", () => findTenantIdByKeyHash(db, keyHash));
      if (tenantId === null) throw new ApiError("unauthorized", "invalid API key");
      rememberTenant(keyHash, tenantId);
    }
    c.set("tenantId", tenantId);
    c.set("apiKeyHash", keyHash);
    await next();
  });
}

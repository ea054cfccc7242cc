/**
 * authenticate alone on a bare app, over an in-memory api_keys table: which credentials it lets
 * through (an API key, a token, a token in the URL of the two routes that take one) and what it
 * puts on the context; what it refuses, with which status and error body.
 */
import { drizzle } from "drizzle-orm/pg-proxy";
import { type Context, Hono } from "hono";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { NeonHttpDb } from "../../../src/db/neon-http";
import { generateApiKey, hashApiKey } from "../../../src/domain/api-keys";
import type { Deps } from "../../deps";
import type { Env } from "../../env";
import { loadConfig } from "../../gateway-config";
import type { GatewayEnv } from "../../types";
import { handleError } from "../error-handler/error-handler";
import { mintToken } from "./access-tokens";
import { authenticate } from "./auth";
import { clearTenantCache } from "./tenant-cache";

const config = loadConfig({
  DATABASE_URL: "postgres://ear:ear@127.0.0.1:1/ear",
  UPSTASH_REDIS_REST_URL: "http://127.0.0.1:1",
  UPSTASH_REDIS_REST_TOKEN: "test-token",
  INTERNAL_SIGNING_SECRET: "test-signing-secret-0123456789",
  TOKEN_SIGNING_SECRET: "test-token-secret-0123456789abcdef",
} as unknown as Env);

/** key hash → its row's tenant and revocation; what findTenantIdByKeyHash reads. */
const apiKeys = new Map<string, { tenantId: string; revokedAt: Date | null }>();
let lookups = 0;
let postgresDown = false;

// drizzle's proxy driver runs the real query builder and hands us the statement; we answer as
// Postgres would from `apiKeys` (rows as arrays, in the select's column order: tenant_id, revoked_at).
const db = drizzle(async (_sql, params) => {
  lookups++;
  if (postgresDown) throw Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
  const row = apiKeys.get(String(params[0]));
  return { rows: row ? [[row.tenantId, row.revokedAt]] : [] };
}) as unknown as NeonHttpDb;

const executionCtx = { waitUntil: () => {}, passThroughOnException: () => {}, props: {} };

function bareApp() {
  const app = new Hono<GatewayEnv>();
  app.onError(handleError);
  app.use(async (c, next) => {
    c.set("config", config);
    c.set("deps", { db: () => db } as unknown as Deps);
    await next();
  });
  app.use("/v1/*", authenticate());
  const who = (c: Context<GatewayEnv>) => ({
    tenantId: c.get("tenantId"),
    apiKeyHash: c.get("apiKeyHash"),
    access: c.get("access").kind,
  });
  app.get("/v1/jobs", (c) => c.json(who(c)));
  app.post("/v1/jobs", (c) => c.json(who(c), 201));
  app.get("/v1/jobs/:id", (c) => c.json(who(c)));
  app.get("/v1/jobs/:id/events", (c) => c.json(who(c)));
  app.post("/v1/tokens", (c) => c.json(who(c), 201));
  return app;
}

function request(path: string, init: RequestInit = {}) {
  return bareApp().request(path, init, undefined, executionCtx as unknown as ExecutionContext);
}
const bearer = (credential: string, init: RequestInit = {}) => ({
  ...init,
  headers: { ...(init.headers as Record<string, string>), authorization: `Bearer ${credential}` },
});

async function expectRefused(res: Response, status: number, code: string, message: string | RegExp) {
  expect(res.status).toBe(status);
  const body = (await res.json()) as { error: { code: string; message: string } };
  expect(body.error.code).toBe(code);
  if (typeof message === "string") expect(body.error.message).toBe(message);
  else expect(body.error.message).toMatch(message);
}

async function liveKey(tenantId = "acme"): Promise<{ key: string; keyHash: string }> {
  const { key } = generateApiKey();
  const keyHash = await hashApiKey(key);
  apiKeys.set(keyHash, { tenantId, revokedAt: null });
  return { key, keyHash };
}

async function token(keyHash: string, grant: { scope?: "read" | "write"; jobId?: string; ttlS?: number } = {}) {
  const minted = await mintToken(config, {
    tenantId: apiKeys.get(keyHash)?.tenantId ?? "acme",
    keyHash,
    scope: grant.scope ?? "write",
    ttlS: grant.ttlS ?? 60,
    ...(grant.jobId !== undefined ? { jobId: grant.jobId } : {}),
  });
  return minted.token;
}

beforeEach(() => {
  vi.restoreAllMocks();
  clearTenantCache();
  apiKeys.clear();
  lookups = 0;
  postgresDown = false;
});

describe("authenticate: API keys", () => {
  it("a live key passes, with its tenant and hash on the context", async () => {
    const { key, keyHash } = await liveKey("acme");
    const res = await request("/v1/jobs", bearer(key));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ tenantId: "acme", apiKeyHash: keyHash, access: "api_key" });
  });

  it("no credential is a 401", async () => {
    await expectRefused(
      await request("/v1/jobs"),
      401,
      "unauthorized",
      "missing credential: send Authorization: Bearer <API key or token>",
    );
  });

  it("an unknown key and a revoked key look the same: 401 `invalid API key`", async () => {
    const { key: unknown } = generateApiKey();
    await expectRefused(await request("/v1/jobs", bearer(unknown)), 401, "unauthorized", "invalid API key");
    const { key, keyHash } = await liveKey();
    apiKeys.set(keyHash, { tenantId: "acme", revokedAt: new Date() });
    await expectRefused(await request("/v1/jobs", bearer(key)), 401, "unauthorized", "invalid API key");
  });

  it("a malformed key is refused without a database query", async () => {
    await expectRefused(await request("/v1/jobs", bearer("ear_not-a-key")), 401, "unauthorized", "invalid API key");
    expect(lookups).toBe(0);
  });

  it("a key found once is served from the cache: one lookup for several requests", async () => {
    const { key } = await liveKey();
    for (let i = 0; i < 3; i++) expect((await request("/v1/jobs", bearer(key))).status).toBe(200);
    expect(lookups).toBe(1);
  });

  it("Postgres unreachable is a 503 `dependency_unavailable`, not a 401", async () => {
    const { key } = await liveKey();
    postgresDown = true;
    vi.spyOn(console, "warn").mockImplementation(() => {});
    await expectRefused(
      await request("/v1/jobs", bearer(key)),
      503,
      "dependency_unavailable",
      "postgres is unavailable; try again shortly",
    );
  });

  it("an API key is never accepted in a URL, under either parameter", async () => {
    const { key } = await liveKey();
    await expectRefused(await request(`/v1/jobs?token=${key}`), 401, "unauthorized", /never accepted in a URL/);
    await expectRefused(
      await request(`/v1/jobs/j1/events?access_token=${key}`),
      401,
      "unauthorized",
      /never accepted in a URL/,
    );
    expect(lookups).toBe(0);
  });
});

describe("authenticate: access tokens", () => {
  it("a token passes as its tenant, counting as the key that minted it", async () => {
    const { keyHash } = await liveKey("acme");
    const res = await request("/v1/jobs", bearer(await token(keyHash)));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ tenantId: "acme", apiKeyHash: keyHash, access: "token" });
  });

  it("a token in the URL is accepted on the event stream only", async () => {
    const { keyHash } = await liveKey();
    const t = await token(keyHash);
    expect((await request(`/v1/jobs/j1/events?access_token=${t}`)).status).toBe(200);
    await expectRefused(
      await request(`/v1/jobs?access_token=${t}`),
      401,
      "unauthorized",
      /accepted only on the event stream and the chat WebSocket/,
    );
  });

  it("a garbage or expired token is 401 `invalid or expired token`", async () => {
    const { keyHash } = await liveKey();
    const good = await token(keyHash);
    const tampered = `${good.slice(0, -2)}${good.endsWith("AA") ? "BB" : "AA"}`;
    await expectRefused(await request("/v1/jobs", bearer(tampered)), 401, "unauthorized", "invalid or expired token");
    const expired = await mintToken(
      config,
      { tenantId: "acme", keyHash, scope: "write", ttlS: 60 },
      Date.now() - 120_000,
    );
    await expectRefused(
      await request("/v1/jobs", bearer(expired.token)),
      401,
      "unauthorized",
      "invalid or expired token",
    );
  });

  it("what a token may not do is a 403 `forbidden`: write with a read token, leave its job, mint tokens", async () => {
    const { keyHash } = await liveKey();
    const read = await token(keyHash, { scope: "read" });
    expect((await request("/v1/jobs", bearer(read))).status).toBe(200);
    await expectRefused(await request("/v1/jobs", bearer(read, { method: "POST" })), 403, "forbidden", /scope is read/);
    const bound = await token(keyHash, { jobId: "j1" });
    expect((await request("/v1/jobs/j1", bearer(bound))).status).toBe(200);
    await expectRefused(await request("/v1/jobs/j2", bearer(bound)), 403, "forbidden", "this token is bound to job j1");
    await expectRefused(
      await request("/v1/tokens", bearer(await token(keyHash), { method: "POST" })),
      403,
      "forbidden",
      /a token cannot mint tokens/,
    );
  });

  it("a token stops working when the key that minted it is revoked", async () => {
    const { keyHash } = await liveKey();
    const t = await token(keyHash);
    apiKeys.set(keyHash, { tenantId: "acme", revokedAt: new Date() });
    await expectRefused(
      await request("/v1/jobs", bearer(t)),
      401,
      "unauthorized",
      "the API key that minted this token is revoked",
    );
  });
});

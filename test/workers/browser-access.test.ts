/**
 * Browser access through the gateway: CORS for the configured origins (preflight answered before
 * auth), and short-lived scoped tokens (POST /v1/tokens) that work as Bearer on REST and as
 * ?access_token= on the SSE and WebSocket routes only, while API keys are refused in any URL.
 * Postgres is down in this suite, so a request a token lets through ends in 503
 * dependency_unavailable at its first query: that is how "authorized" shows here, and 401/403
 * is how "refused" does (both decided without a database).
 */
import { sign } from "hono/jwt";
import { describe, expect, it } from "vitest";
import { TokenAnswerSchema } from "../../src/contracts/tokens";
import { generateApiKey, hashApiKey } from "../../src/domain/api-keys";
import { rememberTenant } from "../../workers/middleware/auth/tenant-cache";
import { ChatClient } from "./chat-helpers";
import { gateway } from "./helpers";

const BASE = "http://gateway.test";
const ORIGIN = "https://console.test";
/** The bindings of vitest.workers.config.ts. */
const SECRET = "test-token-secret-0123456789abcdef";
const PREVIOUS_SECRET = "test-old-token-secret-0123456789ab";

async function knownKey(tenant = `t-${crypto.randomUUID().slice(0, 8)}`): Promise<string> {
  const { key } = generateApiKey();
  rememberTenant(await hashApiKey(key), tenant);
  return key;
}

async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  return ((await res.json()) as { error: { code: string; message: string } }).error;
}

interface Minted {
  token: string;
  token_type: string;
  expires_at: string;
  expires_in: number;
  scope: string;
  job_id: string | null;
  conversation_id: string | null;
}

async function mint(credential: string, body: Record<string, unknown> = {}): Promise<Response> {
  return gateway.fetch(`${BASE}/v1/tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${credential}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function token(body: Record<string, unknown> = {}, key?: string): Promise<string> {
  const res = await mint(key ?? (await knownKey()), body);
  expect(res.status).toBe(201);
  return ((await res.json()) as Minted).token;
}

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const json = { "content-type": "application/json" };
const jobBody = JSON.stringify({ input: { messages: [{ role: "user", content: "hi" }] } });

/** The status a request gets: 503 means auth let it through to its first Postgres query. */
async function statusOf(path: string, init: RequestInit = {}): Promise<number> {
  const res = await gateway.fetch(`${BASE}${path}`, init);
  await res.body?.cancel();
  return res.status;
}

const b64url = (o: unknown) => btoa(JSON.stringify(o)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");

describe("CORS", () => {
  it("answers a preflight from an allowed origin with 204 before auth: no key, no 401", async () => {
    const res = await gateway.fetch(`${BASE}/v1/jobs`, {
      method: "OPTIONS",
      headers: {
        origin: ORIGIN,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
      },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
    expect(res.headers.get("access-control-allow-methods")).toMatch(/POST/);
    expect(res.headers.get("access-control-allow-headers")?.toLowerCase()).toMatch(/authorization/);
    expect(res.headers.get("access-control-allow-headers")?.toLowerCase()).toMatch(/last-event-id/);
    expect(res.headers.get("access-control-allow-credentials")).toBeNull();
    expect(res.headers.get("vary")?.toLowerCase()).toMatch(/origin/);
  });

  it("sends no CORS header at all to an origin that is not configured (docs/api.md), nor without an Origin", async () => {
    const corsHeaders = (res: Response) => [...res.headers.keys()].filter((h) => h.startsWith("access-control-"));
    const res = await gateway.fetch(`${BASE}/v1/jobs`, {
      method: "OPTIONS",
      headers: {
        origin: "https://evil.test",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization",
      },
    });
    await res.body?.cancel();
    expect(corsHeaders(res)).toEqual([]);
    const get = await gateway.fetch(`${BASE}/v1/jobs`, { headers: { origin: "https://evil.test" } });
    await get.body?.cancel();
    expect(get.status).toBe(401);
    expect(corsHeaders(get)).toEqual([]);
    const none = await gateway.fetch(`${BASE}/v1/jobs`);
    await none.body?.cancel();
    expect(none.status).toBe(401);
    expect(corsHeaders(none)).toEqual([]);
  });

  it("an error answer to an allowed origin carries the CORS headers, so the page can read the 401", async () => {
    const res = await gateway.fetch(`${BASE}/v1/jobs`, { headers: { origin: "http://localhost:5173" } });
    expect(res.status).toBe(401);
    expect(res.headers.get("access-control-allow-origin")).toBe("http://localhost:5173");
    expect(res.headers.get("access-control-expose-headers")?.toLowerCase()).toMatch(/retry-after/);
  });
});

describe("POST /v1/tokens", () => {
  it("mints a read token for 15 minutes by default, bound to nothing but the tenant", async () => {
    const before = Date.now();
    const res = await mint(await knownKey("t-minted"));
    expect(res.status).toBe(201);
    const body = (await res.json()) as Minted;
    // The answer is what the contract (and so the OpenAPI TokenAnswer component) says.
    expect(TokenAnswerSchema.safeParse(body).error).toBeUndefined();
    expect(body).toMatchObject({
      tenant_id: "t-minted",
      token_type: "Bearer",
      scope: "read",
      expires_in: 900,
      job_id: null,
      conversation_id: null,
    });
    expect(body.token.split(".")).toHaveLength(3);
    const expires = Date.parse(body.expires_at);
    expect(expires).toBeGreaterThanOrEqual(before + 899_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 901_000);
  });

  it("refuses a bad body: a ttl past 24 h, an unknown scope, both a job and a conversation, unknown fields", async () => {
    const key = await knownKey();
    for (const body of [
      { ttl_s: 86_401 },
      { ttl_s: 0 },
      { scope: "admin" },
      { job_id: crypto.randomUUID(), conversation_id: "c1" },
      { job_id: "not-a-uuid" },
      { surprise: true },
    ]) {
      const res = await mint(key, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect((await errorOf(res)).code).toBe("invalid_request");
    }
    const max = await mint(key, { ttl_s: 86_400, scope: "write" });
    expect(max.status).toBe(201);
    expect(((await max.json()) as Minted).expires_in).toBe(86_400);
    const bound = await mint(key, { job_id: crypto.randomUUID() });
    expect(TokenAnswerSchema.safeParse(await bound.json()).error).toBeUndefined();
  });

  it("a token cannot mint tokens (no widening)", async () => {
    for (const scope of ["read", "write"]) {
      const res = await mint(await token({ scope }), { scope: "write", ttl_s: 86_400 });
      expect(res.status).toBe(403);
      expect((await errorOf(res)).code).toBe("forbidden");
    }
  });
});

describe("tokens on REST routes", () => {
  const jobId = crypto.randomUUID();

  it("a read token reads (GET) and cannot submit, cancel or send input", async () => {
    const t = await token({ scope: "read" });
    expect(await statusOf(`/v1/jobs/${jobId}`, { headers: bearer(t) })).toBe(503);
    expect(await statusOf("/v1/jobs", { headers: bearer(t) })).toBe(503);
    for (const [path, body] of [
      ["/v1/jobs", jobBody],
      [`/v1/jobs/${jobId}/cancel`, undefined],
      [`/v1/jobs/${jobId}/input`, JSON.stringify({ content: "more" })],
    ] as const) {
      const res = await gateway.fetch(`${BASE}${path}`, { method: "POST", headers: { ...bearer(t), ...json }, body });
      expect(res.status, path).toBe(403);
      expect((await errorOf(res)).code).toBe("forbidden");
    }
  });

  it("a write token submits, cancels and sends input", async () => {
    const t = await token({ scope: "write" });
    expect(await statusOf("/v1/jobs", { method: "POST", headers: { ...bearer(t), ...json }, body: jobBody })).toBe(503);
    expect(await statusOf(`/v1/jobs/${jobId}/cancel`, { method: "POST", headers: bearer(t) })).toBe(503);
  });

  it("a job-bound token reaches only its job: not another job, not the list, not a submit", async () => {
    const own = crypto.randomUUID();
    const t = await token({ scope: "write", job_id: own });
    expect(await statusOf(`/v1/jobs/${own}`, { headers: bearer(t) })).toBe(503);
    expect(await statusOf(`/v1/jobs/${own}/inputs`, { headers: bearer(t) })).toBe(503);
    expect(await statusOf(`/v1/jobs/${own}/cancel`, { method: "POST", headers: bearer(t) })).toBe(503);
    for (const [method, path] of [
      ["GET", `/v1/jobs/${crypto.randomUUID()}`],
      ["GET", `/v1/jobs/${crypto.randomUUID()}/events`],
      ["POST", `/v1/jobs/${crypto.randomUUID()}/cancel`],
      ["GET", "/v1/jobs"],
      ["POST", "/v1/jobs"],
      ["GET", `/v1/jobs/${own}x`],
      ["GET", "/v1/conversations/c1/messages"],
    ] as const) {
      const res = await gateway.fetch(`${BASE}${path}`, {
        method,
        headers: { ...bearer(t), ...json },
        body: method === "POST" ? jobBody : undefined,
      });
      expect(res.status, `${method} ${path}`).toBe(403);
    }
  });

  it("a conversation-bound token reaches only its conversation", async () => {
    const t = await token({ scope: "read", conversation_id: "conv-a" });
    expect(await statusOf("/v1/conversations/conv-a/messages", { headers: bearer(t) })).toBe(503);
    expect(await statusOf("/v1/conversations/conv-b/messages", { headers: bearer(t) })).toBe(403);
    // Compared as the router reads the id: an escaped ":" is the same conversation.
    const colon = await token({ scope: "read", conversation_id: "team:42" });
    expect(await statusOf("/v1/conversations/team%3A42/messages", { headers: bearer(colon) })).toBe(503);
    expect(await statusOf("/v1/conversations/team%3A43/messages", { headers: bearer(colon) })).toBe(403);
    expect(await statusOf(`/v1/jobs/${jobId}`, { headers: bearer(t) })).toBe(403);
    expect(await statusOf("/v1/jobs", { headers: bearer(t) })).toBe(403);
  });
});

describe("a token that is not one the gateway issued, or no longer valid, is 401", () => {
  const claims = (over: Record<string, unknown> = {}) => {
    const now = Math.floor(Date.now() / 1000);
    return {
      iss: "ear",
      aud: "ear-api",
      sub: "t-forged",
      iat: now,
      exp: now + 600,
      scope: "write",
      kh: "0".repeat(64),
      ...over,
    };
  };

  async function refused(t: string, label: string) {
    const res = await gateway.fetch(`${BASE}/v1/jobs/${crypto.randomUUID()}`, { headers: bearer(t) });
    expect(res.status, label).toBe(401);
    expect((await errorOf(res)).code, label).toBe("unauthorized");
  }

  it("signed right with the current or the previous secret: accepted (a rotation in progress)", async () => {
    expect(await statusOf(`/v1/jobs/${crypto.randomUUID()}`, { headers: bearer(await sign(claims(), SECRET)) })).toBe(
      503,
    );
    const old = await sign(claims(), PREVIOUS_SECRET);
    expect(await statusOf(`/v1/jobs/${crypto.randomUUID()}`, { headers: bearer(old) })).toBe(503);
  });

  it("expired: minted with ttl_s 1, refused once its second has passed", async () => {
    const t = await token({ ttl_s: 1 });
    expect(await statusOf(`/v1/jobs/${crypto.randomUUID()}`, { headers: bearer(t) })).toBe(503);
    await new Promise((r) => setTimeout(r, 2_100));
    await refused(t, "expired");
  });

  it("expired, not yet issued, or without an expiry (a clock we control: claims signed here)", async () => {
    const now = Math.floor(Date.now() / 1000);
    await refused(await sign(claims({ exp: now - 1 }), SECRET), "exp in the past");
    await refused(await sign(claims({ iat: now + 120 }), SECRET), "issued in the future");
    // A gateway isolate whose clock is a little behind the minting one still accepts the token.
    const skewed = await sign(claims({ iat: now + 30 }), SECRET);
    expect(await statusOf(`/v1/jobs/${crypto.randomUUID()}`, { headers: bearer(skewed) })).toBe(503);
    const { exp: _exp, ...noExp } = claims();
    await refused(await sign(noExp, SECRET), "no exp");
    await refused(await sign(claims({ exp: now + 86_400 * 2 }), SECRET), "longer than the maximum ttl");
  });

  it("tampered, wrong secret, alg none, another algorithm, wrong claims", async () => {
    const good = await token({ scope: "read" });
    const [h, p, s] = good.split(".") as [string, string, string];
    const payload = JSON.parse(atob(p.replace(/-/g, "+").replace(/_/g, "/")));
    await refused(`${h}.${b64url({ ...payload, scope: "write" })}.${s}`, "payload edited, signature kept");
    await refused(`${h}.${p}.${s.slice(0, -2)}${s.endsWith("AA") ? "BB" : "AA"}`, "signature edited");
    await refused(await sign(claims(), "some-other-secret-0123456789abcdef"), "wrong secret");
    await refused(`${b64url({ alg: "none", typ: "JWT" })}.${b64url(claims())}.`, "alg none, empty signature");
    await refused(`${b64url({ alg: "none", typ: "JWT" })}.${b64url(claims())}.${s}`, "alg none, a signature");
    await refused(await sign(claims(), SECRET, "HS512"), "HS512");
    await refused(await sign(claims({ scope: "admin" }), SECRET), "unknown scope");
    await refused(await sign(claims({ aud: "elsewhere" }), SECRET), "another audience");
    await refused(await sign(claims({ sub: undefined }), SECRET), "no tenant");
    await refused("a.b.c", "garbage in a JWT's shape");
  });
});

describe("credentials in URLs", () => {
  it("?access_token= works on the SSE route only among REST routes, and only for a token", async () => {
    const t = await token({ scope: "read" });
    const id = crypto.randomUUID();
    expect(await statusOf(`/v1/jobs/${id}/events?access_token=${t}`)).toBe(503);
    for (const path of [`/v1/jobs/${id}`, "/v1/jobs", `/v1/jobs/${id}/inputs`, "/v1/conversations/c1/messages"]) {
      const res = await gateway.fetch(`${BASE}${path}?access_token=${t}`);
      expect(res.status, path).toBe(401);
      expect((await errorOf(res)).message).toMatch(/access_token/);
    }
    const key = await knownKey();
    const keyInUrl = await gateway.fetch(`${BASE}/v1/jobs/${id}/events?access_token=${key}`);
    expect(keyInUrl.status).toBe(401);
    expect((await errorOf(keyInUrl)).message).toMatch(/API key/);
  });

  it("an API key in ?token= is refused everywhere now, the WebSocket route included", async () => {
    const key = await knownKey();
    const res = await gateway.fetch(`${BASE}/v1/conversations/c1/ws?token=${key}`, {
      headers: { upgrade: "websocket" },
    });
    expect(res.status).toBe(401);
    expect(res.webSocket).toBeNull();
    expect((await errorOf(res)).message).toMatch(/POST \/v1\/tokens/);
  });

  it("the chat WebSocket upgrades with a write token for its conversation in ?access_token=", async () => {
    const t = await token({ scope: "write", conversation_id: "conv-ws" });
    const res = await gateway.fetch(`${BASE}/v1/conversations/conv-ws/ws?access_token=${t}`, {
      headers: { upgrade: "websocket" },
    });
    expect(res.status).toBe(101);
    const client = new ChatClient(res.webSocket as WebSocket);
    client.send({ type: "message", content: "hi", client_message_id: "m1" });
    // Postgres is down: the message cannot become a job, but the socket is open and answers.
    expect(await client.next(10_000)).toMatchObject({ type: "error", error: { code: "dependency_unavailable" } });
    client.close();

    const other = await gateway.fetch(`${BASE}/v1/conversations/conv-other/ws?access_token=${t}`, {
      headers: { upgrade: "websocket" },
    });
    expect(other.status).toBe(403);
    const read = await token({ scope: "read", conversation_id: "conv-ws" });
    const readOnly = await gateway.fetch(`${BASE}/v1/conversations/conv-ws/ws?access_token=${read}`, {
      headers: { upgrade: "websocket" },
    });
    // The socket submits messages: a read token cannot open it.
    expect(readOnly.status).toBe(403);
  });
});

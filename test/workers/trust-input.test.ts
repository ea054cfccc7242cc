/**
 * Bad input is a 400 that names the field, never a 500 from Postgres: NUL characters and unpaired
 * UTF-16 surrogates in every client string, impossible cursor dates, reserved idempotency keys.
 * And an API key is taken from the URL only on the WebSocket route. Postgres is unreachable in
 * this suite, so a request that slipped past validation shows up as 503, not as the 400 expected.
 */
import { describe, expect, it } from "vitest";
import { generateApiKey, hashApiKey } from "../../src/domain/api-keys";
import { rememberTenant } from "../../workers/middleware/auth/tenant-cache";
import { ChatClient } from "./chat-helpers";
import { gateway } from "./helpers";

const BASE = "http://gateway.test";
const NUL = "a\u0000b";
const LONE_HIGH = "a\ud800b";
const LONE_LOW = "\udc00";

async function knownKey(): Promise<string> {
  const { key } = generateApiKey();
  rememberTenant(await hashApiKey(key), `t-${crypto.randomUUID().slice(0, 8)}`);
  return key;
}

async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  return ((await res.json()) as { error: { code: string; message: string } }).error;
}

async function postJson(path: string, body: unknown): Promise<Response> {
  return gateway.fetch(`${BASE}${path}`, {
    method: "POST",
    // JSON.stringify writes U+0000 and lone surrogates as \u escapes: valid JSON, valid UTF-8.
    body: JSON.stringify(body),
    headers: { authorization: `Bearer ${await knownKey()}`, "content-type": "application/json" },
  });
}

const msg = (content: string) => ({ input: { messages: [{ role: "user", content }] } });

describe("unstorable strings are 400 invalid_request naming the field", () => {
  const cases: Array<[string, unknown, RegExp]> = [];
  for (const [label, bad] of [
    ["NUL", NUL],
    ["lone high surrogate", LONE_HIGH],
    ["lone low surrogate", LONE_LOW],
  ] as const) {
    cases.push(
      [`${label} in a message`, msg(bad), /^input\.messages\.0\.content: /],
      [`${label} in the model`, { ...msg("hi"), model: bad }, /^model: /],
      [`${label} in the idempotency key`, { ...msg("hi"), idempotency_key: bad }, /^idempotency_key: /],
      [`${label} in a metadata value`, { ...msg("hi"), metadata: { k: bad } }, /^metadata\.k: /],
      [`${label} in a nested metadata value`, { ...msg("hi"), metadata: { a: [{ b: bad }] } }, /^metadata\.a\.0\.b: /],
      [`${label} in a metadata key`, { ...msg("hi"), metadata: { ok: { [bad]: 1 } } }, /^metadata\.ok: a key /],
    );
  }
  it.each(cases)("POST /v1/jobs: %s", async (_label, body, field) => {
    const res = await postJson("/v1/jobs", body);
    expect(res.status).toBe(400);
    const error = await errorOf(res);
    expect(error.code).toBe("invalid_request");
    expect(error.message).toMatch(field);
    expect(error.message).toMatch(/NUL|surrogate/);
  });

  it.each([
    ["content", { content: NUL }, /^content: /],
    ["content", { content: LONE_HIGH }, /^content: /],
    ["idempotency key", { content: "hi", idempotency_key: NUL }, /^idempotency_key: /],
    ["idempotency key", { content: "hi", idempotency_key: LONE_LOW }, /^idempotency_key: /],
  ])("POST /v1/jobs/:id/input: bad %s", async (_label, body, field) => {
    const res = await postJson(`/v1/jobs/${crypto.randomUUID()}/input`, body);
    expect(res.status).toBe(400);
    expect((await errorOf(res)).message).toMatch(field);
  });

  it("a well-formed surrogate pair and ordinary control characters are accepted (503: they reach Postgres)", async () => {
    const res = await postJson("/v1/jobs", { ...msg("emoji 🌍 tab\t"), metadata: { "🌍": "\u0001" } });
    expect(res.status).toBe(503);
  });

  it("chat frames: NUL or a lone surrogate in content is an invalid_frame error, and no job", async () => {
    const res = await gateway.fetch(`${BASE}/v1/conversations/conv-bad-text/ws`, {
      headers: { upgrade: "websocket", authorization: `Bearer ${await knownKey()}` },
    });
    expect(res.status).toBe(101);
    const client = new ChatClient(res.webSocket as WebSocket);
    for (const content of [NUL, LONE_HIGH]) {
      client.send({ type: "message", content, client_message_id: "m1" });
      const frame = await client.next(10_000);
      expect(frame).toMatchObject({ type: "error", error: { code: "invalid_frame" } });
      expect((frame as { error: { message: string } }).error.message).toMatch(/^content: .*(NUL|surrogate)/);
    }
    client.send({ type: "cancel", job_id: NUL });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "invalid_frame" } });
    client.close();
  });
});

describe("conversation ids . and ..", () => {
  // `/v1/conversations/../messages` normalizes to `/v1/messages`: a conversation of that id could
  // be written but never read, streamed or bound to a token's path.
  it.each([".", ".."])("%s is 400 naming conversation_id on POST /v1/jobs and POST /v1/tokens", async (id) => {
    for (const [path, body] of [
      ["/v1/jobs", { ...msg("hi"), conversation_id: id }],
      ["/v1/tokens", { scope: "read", conversation_id: id }],
    ] as const) {
      const res = await postJson(path, body);
      expect(res.status, path).toBe(400);
      const error = await errorOf(res);
      expect(error.code).toBe("invalid_request");
      expect(error.message).toMatch(/^conversation_id: .*\. or \.\./);
    }
  });

  it("ids that merely contain dots are still accepted (503: they reach Postgres)", async () => {
    for (const id of ["...", ".a", "a..b", "v1.2"]) {
      const res = await postJson("/v1/jobs", { ...msg("hi"), conversation_id: id });
      await res.body?.cancel();
      expect(res.status, id).toBe(503);
    }
  });
});

describe("list cursors", () => {
  it("a cursor with an impossible date is 400, not a Postgres error", async () => {
    const headers = { authorization: `Bearer ${await knownKey()}` };
    for (const when of ["2026-02-31T00:00:00.000000Z", "2026-13-01T00:00:00Z", "2026-04-31T25:61:00Z"]) {
      const cursor = btoa(JSON.stringify([when, crypto.randomUUID()])).replace(/=+$/, "");
      const res = await gateway.fetch(`${BASE}/v1/jobs?cursor=${cursor}`, { headers });
      expect(res.status, when).toBe(400);
      expect((await errorOf(res)).message).toMatch(/^cursor: /);
    }
    // A real date in the same shape gets past validation (503: Postgres is down here).
    const ok = btoa(JSON.stringify(["2026-02-28T23:59:59.999999Z", crypto.randomUUID()])).replace(/=+$/, "");
    expect((await gateway.fetch(`${BASE}/v1/jobs?cursor=${ok}`, { headers })).status).toBe(503);
  });
});

describe("idempotency keys", () => {
  it("a REST idempotency key cannot use the prefix reserved for chat messages", async () => {
    const res = await postJson("/v1/jobs", { ...msg("hi"), idempotency_key: "chat:conv:m1" });
    expect(res.status).toBe(400);
    expect((await errorOf(res)).message).toMatch(/^idempotency_key: .*chat:/);
  });
});

describe("API keys in the URL", () => {
  it("?token= (an API key in the URL) is refused on every route, the WebSocket one included", async () => {
    const key = await knownKey();
    const upgrade = { upgrade: "websocket" };
    for (const path of [
      `/v1/jobs/${crypto.randomUUID()}`,
      "/v1/jobs",
      `/v1/jobs/${crypto.randomUUID()}/events`,
      "/v1/conversations/c1/messages",
      "/v1/conversations/c1/ws",
    ]) {
      const res = await gateway.fetch(`${BASE}${path}?token=${key}`, { headers: upgrade });
      expect(res.status, path).toBe(401);
      expect((await errorOf(res)).code).toBe("unauthorized");
    }
  });
});

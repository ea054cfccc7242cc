/** Gateway routes that need no Postgres: health, errors, auth refusals, validation, dependency-down. */
import { describe, expect, it } from "vitest";
import { LIMITS } from "../../src/contracts/job";
import { generateApiKey, hashApiKey } from "../../src/domain/api-keys";
import { rememberTenant } from "../../workers/middleware/auth/tenant-cache";
import { parseEventCursor } from "../../workers/routes/job-events";
import { gateway } from "./helpers";

const BASE = "http://gateway.test";

async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  const body = (await res.json()) as { error: { code: string; message: string } };
  return body.error;
}

/** A well-formed key the auth middleware already knows (seeded into its per-isolate cache). */
async function knownKey(): Promise<string> {
  const { key } = generateApiKey();
  rememberTenant(await hashApiKey(key), crypto.randomUUID());
  return key;
}

describe("gateway basics", () => {
  it("GET /healthz answers without auth", async () => {
    const res = await gateway.fetch(`${BASE}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
  });

  it("an unknown route is a JSON 404", async () => {
    const res = await gateway.fetch(`${BASE}/nope`);
    expect(res.status).toBe(404);
    expect((await errorOf(res)).code).toBe("not_found");
  });

  it("GET /readyz is 503 and names both dependencies when neither answers", async () => {
    const res = await gateway.fetch(`${BASE}/readyz`);
    expect(res.status).toBe(503);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ ok: false, postgres: "unavailable", redis: "unavailable" });
    expect(body.error).toMatchObject({ code: "dependency_unavailable", message: "postgres and redis did not answer" });
  });
});

describe("API key auth on /v1", () => {
  it.each([
    ["no Authorization header", {}],
    ["a non-Bearer scheme", { authorization: "Basic dXNlcjpwYXNz" }],
    ["a malformed key", { authorization: "Bearer not-a-key" }],
    ["an empty Bearer", { authorization: "Bearer " }],
  ])("refuses %s with 401 unauthorized", async (_label, headers: Record<string, string>) => {
    const res = await gateway.fetch(`${BASE}/v1/jobs`, { headers });
    expect(res.status).toBe(401);
    const error = await errorOf(res);
    expect(error.code).toBe("unauthorized");
    expect(error.message).not.toMatch(/at .*\.ts/);
  });

  it("does not accept an API key in ?token=", async () => {
    const key = await knownKey();
    const res = await gateway.fetch(`${BASE}/v1/jobs/${crypto.randomUUID()}?token=${key}`);
    expect(res.status).toBe(401);
  });

  it("a well-formed key while Postgres is down is 503 dependency_unavailable, not 401 or 500", async () => {
    const { key } = generateApiKey();
    const res = await gateway.fetch(`${BASE}/v1/jobs`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(503);
    expect((await errorOf(res)).code).toBe("dependency_unavailable");
  });
});

describe("POST /v1/jobs validation (before any database work)", () => {
  const valid = { input: { messages: [{ role: "user", content: "hi" }] } };

  async function post(body: BodyInit, headers: Record<string, string> = {}): Promise<Response> {
    return gateway.fetch(`${BASE}/v1/jobs`, {
      method: "POST",
      body,
      headers: { authorization: `Bearer ${await knownKey()}`, "content-type": "application/json", ...headers },
    });
  }

  it("rejects a non-JSON content type with 415", async () => {
    const res = await post(JSON.stringify(valid), { "content-type": "text/plain" });
    expect(res.status).toBe(415);
    expect((await errorOf(res)).code).toBe("unsupported_media_type");
  });

  it("rejects malformed JSON with 400 invalid_json", async () => {
    const res = await post("{not json");
    expect(res.status).toBe(400);
    expect((await errorOf(res)).code).toBe("invalid_json");
  });

  it("names the offending field on a schema failure", async () => {
    const res = await post(JSON.stringify({ input: { messages: [] } }));
    expect(res.status).toBe(400);
    const error = await errorOf(res);
    expect(error.code).toBe("invalid_request");
    expect(error.message).toMatch(/^input\.messages: /);
  });

  it("rejects unknown top-level fields", async () => {
    const res = await post(JSON.stringify({ ...valid, surprise: 1 }));
    expect(res.status).toBe(400);
    expect((await errorOf(res)).message).toMatch(/surprise/);
  });

  it("rejects a body over the limit by content-length with 413", async () => {
    const big = JSON.stringify({ input: { messages: [{ role: "user", content: "x".repeat(LIMITS.maxBodyBytes) }] } });
    const res = await post(big);
    expect(res.status).toBe(413);
    expect((await errorOf(res)).code).toBe("payload_too_large");
  });

  it("rejects a streamed body over the limit by the bytes actually read", async () => {
    const chunk = new TextEncoder().encode("x".repeat(64 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent > LIMITS.maxBodyBytes + chunk.byteLength) return controller.close();
        sent += chunk.byteLength;
        controller.enqueue(chunk);
      },
    });
    const res = await post(stream);
    expect(res.status).toBe(413);
  });

  it("a valid job while Postgres is down is 503 dependency_unavailable", async () => {
    const res = await post(JSON.stringify(valid));
    expect(res.status).toBe(503);
    expect((await errorOf(res)).code).toBe("dependency_unavailable");
  });

  it("an invalid list query is 400 before any database work", async () => {
    const headers = { authorization: `Bearer ${await knownKey()}` };
    const badState = await gateway.fetch(`${BASE}/v1/jobs?state=sleeping`, { headers });
    expect(badState.status).toBe(400);
    expect((await errorOf(badState)).message).toMatch(/^state: /);
    const badCursor = await gateway.fetch(`${BASE}/v1/jobs?cursor=garbage`, { headers });
    expect(badCursor.status).toBe(400);
    expect((await errorOf(badCursor)).message).toMatch(/^cursor: /);
  });

  it("an invalid event cursor is 400 before any database work", async () => {
    const headers = { authorization: `Bearer ${await knownKey()}` };
    const res = await gateway.fetch(`${BASE}/v1/jobs/${crypto.randomUUID()}/events?after=-3`, { headers });
    expect(res.status).toBe(400);
    expect((await errorOf(res)).message).toMatch(/^after: /);
  });
});

describe("POST /v1/jobs/batch validation (before any database work): refusals name the item", () => {
  const ok = (content = "hi") => ({ input: { messages: [{ role: "user", content }] } });

  async function postBatch(body: unknown): Promise<{ status: number; error: { code: string; message: string } }> {
    const res = await gateway.fetch(`${BASE}/v1/jobs/batch`, {
      method: "POST",
      body: typeof body === "string" ? body : JSON.stringify(body),
      headers: { authorization: `Bearer ${await knownKey()}`, "content-type": "application/json" },
    });
    return { status: res.status, error: await errorOf(res) };
  }

  it("an invalid item: 400 with its index and field", async () => {
    const jobs = [ok(), ok(), ok(), { input: { messages: [] } }, ok()];
    const r = await postBatch({ jobs });
    expect(r.status).toBe(400);
    expect(r.error.code).toBe("invalid_request");
    expect(r.error.message).toMatch(/^jobs\[3\]\.input\.messages: /);
  });

  it("an unknown field in an item names the item and the field", async () => {
    const r = await postBatch({ jobs: [ok(), { ...ok(), surprise: 1 }] });
    expect(r.status).toBe(400);
    expect(r.error.message).toMatch(/^jobs\[1\]: .*surprise/);
  });

  it.each([
    ["no jobs", { jobs: [] }, /^jobs: /],
    ["more than 100", { jobs: Array.from({ length: LIMITS.maxBatchJobs + 1 }, () => ok()) }, /^jobs: /],
    ["no jobs field", { input: ok().input }, /jobs/],
    ["jobs not an array", { jobs: ok() }, /^jobs: /],
  ])("the envelope: %s is 400", async (_label, body, message) => {
    const r = await postBatch(body);
    expect(r.status).toBe(400);
    expect(r.error.code).toBe("invalid_request");
    expect(r.error.message).toMatch(message);
  });

  it("a key repeated inside the batch is 400 naming both items", async () => {
    const r = await postBatch({
      jobs: [{ ...ok("a"), idempotency_key: "same" }, ok(), { ...ok("a"), idempotency_key: "same" }],
    });
    expect(r.status).toBe(400);
    expect(r.error.message).toMatch(/^jobs\[2\]\.idempotency_key: repeats jobs\[0\]'s/);
  });

  it("a model the deployment does not offer is 400 naming the item", async () => {
    const r = await postBatch({ jobs: [ok(), { ...ok(), model: "not-offered" }] });
    expect(r.status).toBe(400);
    expect(r.error.message).toMatch(/^jobs\[1\]\.model: "not-offered" is not offered/);
  });

  it("an item past the single-job body cap is 413 naming it, though the batch fits its own cap", async () => {
    const big = "x".repeat(LIMITS.maxMessageChars - 100);
    const heavy = { input: { messages: Array.from({ length: 5 }, () => ({ role: "user", content: big })) } };
    expect(JSON.stringify(heavy).length).toBeGreaterThan(LIMITS.maxBodyBytes);
    const r = await postBatch({ jobs: [ok(), heavy] });
    expect(r.status).toBe(413);
    expect(r.error.code).toBe("payload_too_large");
    expect(r.error.message).toMatch(/^jobs\[1\]: exceeds/);
  });

  it("a batch past its own body cap (1 MiB) is 413", async () => {
    const big = "x".repeat(LIMITS.maxMessageChars - 100);
    const item = { input: { messages: Array.from({ length: 3 }, () => ({ role: "user", content: big })) } };
    const jobs = Array.from({ length: 6 }, () => item);
    expect(JSON.stringify({ jobs }).length).toBeGreaterThan(LIMITS.maxBatchBodyBytes);
    const r = await postBatch({ jobs });
    expect(r.status).toBe(413);
    expect(r.error.message).toBe(`request body exceeds ${LIMITS.maxBatchBodyBytes} bytes`);
  });
});

describe("parseEventCursor", () => {
  it("prefers Last-Event-ID over ?after= and accepts only non-negative integers", () => {
    expect(parseEventCursor(undefined, undefined)).toBe(0);
    expect(parseEventCursor(undefined, "7")).toBe(7);
    expect(parseEventCursor("9", "7")).toBe(9);
    for (const bad of ["-1", "1.5", "abc", "1e3", "99999999999999999"]) {
      expect(() => parseEventCursor(undefined, bad)).toThrow(/after/);
      expect(() => parseEventCursor(bad, undefined)).toThrow(/Last-Event-ID/);
    }
  });
});

/** The chat WebSocket route through the whole gateway: auth before upgrade, routing to the tenant's session. */
import { describe, expect, it } from "vitest";
import { generateApiKey, hashApiKey } from "../../src/domain/api-keys";
import { rememberTenant } from "../../workers/middleware/auth/tenant-cache";
import { ChatClient } from "./chat-helpers";
import { gateway } from "./helpers";

const BASE = "http://gateway.test";

async function knownKey(): Promise<string> {
  const { key } = generateApiKey();
  rememberTenant(await hashApiKey(key), `t-${crypto.randomUUID().slice(0, 8)}`);
  return key;
}

const upgrade = { upgrade: "websocket" };

describe("GET /v1/conversations/:id/ws", () => {
  it("refuses a missing or bad key with a JSON 401 before any upgrade", async () => {
    for (const url of [`${BASE}/v1/conversations/c1/ws`, `${BASE}/v1/conversations/c1/ws?token=nonsense`]) {
      const res = await gateway.fetch(url, { headers: upgrade });
      expect(res.status).toBe(401);
      expect(res.webSocket).toBeNull();
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("unauthorized");
    }
  });

  it("answers a malformed conversation id with 404, a non-upgrade with 400 and a bad policy with 400", async () => {
    const key = await knownKey();
    const auth = { authorization: `Bearer ${key}` };
    const bad = await gateway.fetch(`${BASE}/v1/conversations/${"x".repeat(201)}/ws`, {
      headers: { ...auth, ...upgrade },
    });
    expect(bad.status).toBe(404);
    expect((await gateway.fetch(`${BASE}/v1/conversations/c1/ws`, { headers: auth })).status).toBe(400);
    const policy = await gateway.fetch(`${BASE}/v1/conversations/c1/ws?multitask=yolo`, {
      headers: { ...auth, ...upgrade },
    });
    expect(policy.status).toBe(400);
  });

  it("upgrades with a token in ?access_token=, and a dependency outage is an error frame on an open connection", async () => {
    const minted = await gateway.fetch(`${BASE}/v1/tokens`, {
      method: "POST",
      headers: { authorization: `Bearer ${await knownKey()}`, "content-type": "application/json" },
      body: JSON.stringify({ scope: "write", conversation_id: "conv-1" }),
    });
    const { token } = (await minted.json()) as { token: string };
    const res = await gateway.fetch(`${BASE}/v1/conversations/conv-1/ws?access_token=${token}`, { headers: upgrade });
    expect(res.status).toBe(101);
    const client = new ChatClient(res.webSocket as WebSocket);
    // Postgres is unreachable in this suite: the message cannot become a job, the socket stays.
    client.send({ type: "message", content: "hi", client_message_id: "m1" });
    expect(await client.next(10_000)).toMatchObject({
      type: "error",
      error: { code: "dependency_unavailable" },
      client_message_id: "m1",
    });
    client.send("{");
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "invalid_frame" } });
    client.close();
  });
});

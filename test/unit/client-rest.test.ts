/**
 * The client's REST calls and its chat URL, against a recording fetch: the request each method
 * makes (method, path, query, headers, body), how answers map (202 vs 200 on submit, the error
 * shape to ApiClientError), and that the chat socket never carries an API key: the client mints
 * a conversation-bound write token for it, or passes a token it already holds.
 */
import { describe, expect, it } from "vitest";
import type { WebSocketLike } from "../../src/client/chat";
import { EarClient } from "../../src/client/client";
import { ApiClientError } from "../../src/client/http";

const KEY = `ear_0123abcd_${"f".repeat(64)}`;
const TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0In0.c2ln";

interface Call {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: unknown;
}

function recorder(answer: (call: Call) => Response) {
  const calls: Call[] = [];
  const fetchImpl = (async (url: string, init: RequestInit = {}) => {
    const call = {
      method: init.method ?? "GET",
      url,
      headers: Object.fromEntries(new Headers(init.headers).entries()),
      body: init.body === undefined ? undefined : JSON.parse(String(init.body)),
    };
    calls.push(call);
    return answer(call);
  }) as unknown as typeof fetch;
  return { calls, fetchImpl };
}

describe("client REST calls", () => {
  it("sends the credential as Bearer, JSON bodies with their content type, and maps 202/200 to created", async () => {
    let status = 202;
    const { calls, fetchImpl } = recorder(() => Response.json({ job: { id: "j1", state: "queued" } }, { status }));
    const api = new EarClient({ baseUrl: "http://g.test/", credential: KEY, fetch: fetchImpl });
    const body = { input: { messages: [{ role: "user" as const, content: "hi" }] }, idempotency_key: "k" };
    expect((await api.submit(body)).created).toBe(true);
    status = 200;
    expect((await api.submit(body)).created).toBe(false);
    expect(calls[0]).toEqual({
      method: "POST",
      url: "http://g.test/v1/jobs",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body,
    });
  });

  it("builds list queries, encodes ids, and asks the credential function on every call (token refresh)", async () => {
    const { calls, fetchImpl } = recorder((c) =>
      c.url.includes("/v1/jobs?")
        ? Response.json({ jobs: [], next_cursor: null })
        : Response.json({ status: "requested" }),
    );
    let n = 0;
    const api = new EarClient({ baseUrl: "http://g.test", credential: () => `tok-${++n}`, fetch: fetchImpl });
    await api.list({ state: "running", limit: 5, cursor: "abc=" });
    await api.cancel("a/b");
    expect(calls.map((c) => `${c.method} ${c.url} ${c.headers.authorization}`)).toEqual([
      "GET http://g.test/v1/jobs?state=running&limit=5&cursor=abc%3D Bearer tok-1",
      "POST http://g.test/v1/jobs/a%2Fb/cancel Bearer tok-2",
    ]);
  });

  it("decides an approval: the call id encoded, 202 created, 200 the recorded decision", async () => {
    let status = 202;
    const answer = {
      call_id: "c/1",
      decision: "deny",
      note: "no",
      decided_at: "2026-12-01T00:00:00.000Z",
      decided_by: "api",
    };
    const { calls, fetchImpl } = recorder(() => Response.json(answer, { status }));
    const api = new EarClient({ baseUrl: "http://g.test", credential: KEY, fetch: fetchImpl });
    expect(await api.decide("j1", "c/1", { decision: "deny", note: "no" })).toEqual({ answer, created: true });
    status = 200;
    expect((await api.decide("j1", "c/1", { decision: "deny" })).created).toBe(false);
    expect(calls[0]).toMatchObject({
      method: "POST",
      url: "http://g.test/v1/jobs/j1/approvals/c%2F1",
      body: { decision: "deny", note: "no" },
    });
  });

  it("turns the API's error shape into ApiClientError with its code and Retry-After", async () => {
    const { fetchImpl } = recorder(() =>
      Response.json(
        { error: { code: "rate_limited", message: "slow down" } },
        { status: 429, headers: { "retry-after": "7" } },
      ),
    );
    const err = await new EarClient({ baseUrl: "http://g.test", fetch: fetchImpl }).get("j").catch((e) => e);
    expect(err).toBeInstanceOf(ApiClientError);
    expect(err).toMatchObject({ status: 429, code: "rate_limited", retryAfterS: 7 });
    const { fetchImpl: html } = recorder(() => new Response("<h1>bad gateway</h1>", { status: 502 }));
    const other = await new EarClient({ baseUrl: "http://g.test", fetch: html }).get("j").catch((e) => e);
    expect(other).toMatchObject({ status: 502, code: "http_502" });
  });
});

describe("client chat URL", () => {
  const opened: string[] = [];
  const Recording = class implements WebSocketLike {
    readyState = 0;
    constructor(url: string) {
      opened.push(url);
    }
    addEventListener(): void {}
    send(): void {}
    close(): void {}
  };

  async function urlFor(credential: string) {
    opened.length = 0;
    const { calls, fetchImpl } = recorder(() => Response.json({ token: "minted.tok.en" }, { status: 201 }));
    const api = new EarClient({ baseUrl: "https://g.test", credential, fetch: fetchImpl, WebSocket: Recording });
    const chat = api.chat("conv:1", { multitask: "reject" });
    for (let i = 0; i < 20 && opened.length === 0; i++) await new Promise((r) => setTimeout(r, 1));
    chat.close();
    return { url: opened[0] ?? "", calls };
  }

  it("with an API key: mints a write token bound to the conversation and never puts the key in the URL", async () => {
    const { url, calls } = await urlFor(KEY);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({
      method: "POST",
      url: "https://g.test/v1/tokens",
      body: { scope: "write", conversation_id: "conv:1" },
    });
    expect(url).toBe("wss://g.test/v1/conversations/conv%3A1/ws?multitask=reject&access_token=minted.tok.en");
    expect(url).not.toContain(KEY);
  });

  it("with a token: uses it as it is, no mint", async () => {
    const { url, calls } = await urlFor(TOKEN);
    expect(calls).toHaveLength(0);
    expect(url).toBe(`wss://g.test/v1/conversations/conv%3A1/ws?multitask=reject&access_token=${TOKEN}`);
  });
});

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
    expect(await api.decide("j1", "c/1", { decision: "deny", note: "no" })).toEqual({ ...answer, created: true });
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

  async function urlFor(credential: string, agent?: string) {
    opened.length = 0;
    const { calls, fetchImpl } = recorder(() => Response.json({ token: "minted.tok.en" }, { status: 201 }));
    const api = new EarClient({ baseUrl: "https://g.test", credential, fetch: fetchImpl, WebSocket: Recording });
    const chat = api.chat("conv:1", { multitask: "reject", ...(agent ? { agent } : {}) });
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

  it("names the connection's agent in ?agent=", async () => {
    const { url } = await urlFor(TOKEN, "triage@2");
    expect(new URL(url).searchParams.get("agent")).toBe("triage@2");
  });
});

describe("client agent, model and usage calls", () => {
  const AGENT = { name: "triage", version: 1, latest_version: 1, model: "mock-model", archived_at: null };

  function agentApi() {
    const { calls, fetchImpl } = recorder((c) => {
      if (c.url.endsWith("/v1/models")) return Response.json({ models: [{ name: "mock-model", default: true }] });
      if (c.url.includes("/v1/usage")) return Response.json({ from: "2026-03-01", to: "2026-03-02", usage: [] });
      if (/\/v1\/agents(\/[^/]+\/versions)?(\?|$)/.test(c.url) && c.method === "GET") {
        return Response.json({ agents: [AGENT], versions: [AGENT], next_cursor: "n1" });
      }
      return Response.json(
        { agent: AGENT },
        { status: c.method === "POST" && !c.url.endsWith("/archive") ? 201 : 200 },
      );
    });
    return { calls, api: new EarClient({ baseUrl: "http://g.test", credential: KEY, fetch: fetchImpl }) };
  }

  it("makes each agent route's request and returns its body, `{agent}` or the page", async () => {
    const { calls, api } = agentApi();
    const definition = { model: "mock-model", instructions: "Be brief.", limits: { max_turns: 2 } };
    expect(await api.createAgent({ name: "triage", ...definition })).toEqual({ agent: AGENT });
    expect(await api.listAgents()).toEqual({ agents: [AGENT], versions: [AGENT], next_cursor: "n1" });
    await api.listAgents({ limit: 5, cursor: "c/1=" });
    expect(await api.getAgent("tri age")).toEqual({ agent: AGENT });
    expect((await api.listAgentVersions("triage", { cursor: "v2" })).versions).toEqual([AGENT]);
    await api.listAgentVersions("triage");
    expect(await api.getAgentVersion("triage", 3)).toEqual({ agent: AGENT });
    expect(await api.createAgentVersion("triage", definition)).toEqual({ agent: AGENT });
    expect(await api.archiveAgent("triage")).toEqual({ agent: AGENT });
    expect(calls.map((c) => `${c.method} ${c.url}`)).toEqual([
      "POST http://g.test/v1/agents",
      "GET http://g.test/v1/agents",
      "GET http://g.test/v1/agents?limit=5&cursor=c%2F1%3D",
      "GET http://g.test/v1/agents/tri%20age",
      "GET http://g.test/v1/agents/triage/versions?cursor=v2",
      "GET http://g.test/v1/agents/triage/versions",
      "GET http://g.test/v1/agents/triage/versions/3",
      "POST http://g.test/v1/agents/triage/versions",
      "POST http://g.test/v1/agents/triage/archive",
    ]);
    expect(calls[0]?.body).toEqual({ name: "triage", ...definition });
    expect(calls[7]?.body).toEqual(definition); // the whole next definition, no name
    expect(calls[8]?.body).toBeUndefined(); // archive has no body
    for (const c of calls) expect(c.headers.authorization).toBe(`Bearer ${KEY}`);
  });

  it("lists models and asks for usage by day range", async () => {
    const { calls, api } = agentApi();
    expect(await api.listModels()).toEqual({ models: [{ name: "mock-model", default: true }] });
    expect(await api.usage({ from: "2026-03-01", to: "2026-03-02" })).toEqual({
      from: "2026-03-01",
      to: "2026-03-02",
      usage: [],
    });
    expect(calls.map((c) => `${c.method} ${c.url}`)).toEqual([
      "GET http://g.test/v1/models",
      "GET http://g.test/v1/usage?from=2026-03-01&to=2026-03-02",
    ]);
  });

  it("maps an agent route's error (409 on an archived agent) to ApiClientError", async () => {
    const { fetchImpl } = recorder(() =>
      Response.json({ error: { code: "conflict", message: "agent triage is archived" } }, { status: 409 }),
    );
    const api = new EarClient({ baseUrl: "http://g.test", fetch: fetchImpl });
    const err = await api.createAgentVersion("triage", { model: "m" }).catch((e) => e);
    expect(err).toBeInstanceOf(ApiClientError);
    expect(err).toMatchObject({ status: 409, code: "conflict" });
  });
});

/**
 * The typed client against the OpenAPI document the gateway serves (generated from the app, what
 * GET /openapi.json answers): every client call, made against a recording fetch and WebSocket,
 * must hit a documented operation; every operation must be hit by some call or be listed in
 * NOT_CLIENT_OPERATIONS with its reason; every documented query parameter of a covered operation
 * must be sent by some call or be listed in NOT_SENT_PARAMETERS; and every JSON call must return
 * its route's body exactly (the client's one rule, src/client/client.ts), plus `created` where
 * the route answers a repeat with 200 instead of 202. A new route, a new query parameter or a
 * new client method (the CALLS table is typed by EarClient's methods) cannot be forgotten.
 */
import { describe, expect, it } from "vitest";
import type { WebSocketLike } from "../../src/client/chat";
import { EarClient } from "../../src/client/client";
import { SSE_FINISHED_STATUS } from "../../src/contracts/sse";
import { gatewayOpenApiDocument } from "../helpers/openapi-document";

/** Operations no client call makes, by operationId, with why. */
const NOT_CLIENT_OPERATIONS: Record<string, string> = {
  health: "a liveness probe for load balancers and operators; no key, nothing a tenant's code asks",
  ready: "a readiness probe for load balancers and operators; no key",
  openapi: "this document itself, for tooling; the client is built from the same contracts",
  ingestEvents: "internal: sandbox-hosts deliver outbox batches, signed with INTERNAL_SIGNING_SECRET",
  putBlob: "internal: sandbox-hosts store artifacts' bytes, signed with INTERNAL_SIGNING_SECRET",
  getBlob: "internal: sandbox-hosts read a workspace snapshot back, signed with INTERNAL_SIGNING_SECRET",
};

/** Documented query parameters no client call sends, as `operationId.name`, with why. */
const NOT_SENT_PARAMETERS: Record<string, string> = {
  "streamJobEvents.after":
    "for clients that cannot set headers (EventSource); the client resumes with Last-Event-ID, which wins",
};

const TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0In0.c2ln";
const JOB = "00000000-0000-4000-8000-000000000001";

type ClientCall = {
  [K in keyof EarClient]: EarClient[K] extends (...args: never[]) => unknown ? K : never;
}[keyof EarClient];

async function drain(it: AsyncIterable<unknown>): Promise<undefined> {
  for await (const _ of it);
  return undefined;
}

/** Every client method, each with the invocations that together send every parameter it can. */
const CALLS: Record<ClientCall, Array<(api: EarClient) => Promise<unknown>>> = {
  submit: [(api) => api.submit({ input: { messages: [{ role: "user", content: "hi" }] } })],
  submitBatch: [(api) => api.submitBatch([{ input: { messages: [{ role: "user", content: "hi" }] } }])],
  get: [(api) => api.get(JOB), (api) => api.get(JOB, { include: "input" })],
  list: [(api) => api.list({ state: "running", limit: 5, cursor: "c1", schedule_id: JOB })],
  tree: [(api) => api.tree(JOB)],
  cancel: [(api) => api.cancel(JOB)],
  steps: [(api) => api.steps(JOB, { after: 3, limit: 10 })],
  fork: [
    (api) =>
      api.fork(JOB, {
        from_step: 4,
        agent: "triage@2",
        append_messages: [{ role: "user", content: "try again" }],
        replace_result: { call_id: "call-1", result: { ok: true } },
      }),
  ],
  rerun: [(api) => api.rerun(JOB, { agent: "triage" })],
  createReplay: [
    (api) =>
      api.createReplay({
        filter: {
          agent: "triage@2",
          state: "completed",
          since: "2026-03-01T00:00:00Z",
          until: "2026-03-02T00:00:00Z",
          limit: 50,
        },
        agent: "triage@3",
      }),
  ],
  getReplay: [(api) => api.getReplay(JOB)],
  createEval: [
    (api) =>
      api.createEval({
        agent: "triage@2",
        cases: [{ input: { messages: [{ role: "user", content: "hi" }] }, expect: "hello" }],
        scorers: [
          { type: "equals" },
          { type: "regex", pattern: "^h", flags: "i" },
          { type: "judge", agent: "grader", threshold: 0.7 },
        ],
      }),
  ],
  listEvals: [(api) => api.listEvals({ limit: 5, cursor: "c1" })],
  getEval: [(api) => api.getEval(JOB)],
  compareEvals: [(api) => api.compareEvals(JOB, JOB)],
  input: [(api) => api.input(JOB, { content: "more" })],
  decide: [(api) => api.decide(JOB, "call-1", { decision: "approve" })],
  decideInConversation: [(api) => api.decideInConversation("conv-1", JOB, "call-1", { decision: "deny", note: "no" })],
  inputs: [(api) => api.inputs(JOB)],
  artifacts: [(api) => api.artifacts(JOB)],
  artifact: [(api) => api.artifact(JOB, "reports/q1 summary.csv")],
  events: [(api) => drain(api.events(JOB)), (api) => drain(api.events(JOB, { descendants: true }))],
  messages: [(api) => api.messages("conv-1")],
  chat: [
    async (api) => {
      const conn = api.chat("conv-1", { multitask: "reject", agent: "triage" });
      for (let i = 0; i < 50 && sockets.length === 0; i++) await new Promise((r) => setTimeout(r, 1));
      conn.close();
      return undefined;
    },
  ],
  createAgent: [(api) => api.createAgent({ name: "triage", model: "mock-model" })],
  listAgents: [(api) => api.listAgents({ limit: 5, cursor: "c1" })],
  getAgent: [(api) => api.getAgent("triage")],
  listAgentVersions: [(api) => api.listAgentVersions("triage", { limit: 5, cursor: "c1" })],
  getAgentVersion: [(api) => api.getAgentVersion("triage", 2)],
  createAgentVersion: [(api) => api.createAgentVersion("triage", { model: "mock-model" })],
  archiveAgent: [(api) => api.archiveAgent("triage")],
  createSchedule: [
    (api) => api.createSchedule({ cron: "0 9 * * *", input: { messages: [{ role: "user", content: "hi" }] } }),
  ],
  listSchedules: [(api) => api.listSchedules()],
  getSchedule: [(api) => api.getSchedule(JOB)],
  updateSchedule: [(api) => api.updateSchedule(JOB, { enabled: false })],
  deleteSchedule: [(api) => api.deleteSchedule(JOB)],
  createWebhook: [(api) => api.createWebhook({ url: "https://hooks.example.com/ear", events: ["job.completed"] })],
  listWebhooks: [(api) => api.listWebhooks()],
  getWebhook: [(api) => api.getWebhook(JOB)],
  deleteWebhook: [(api) => api.deleteWebhook(JOB)],
  listWebhookDeliveries: [(api) => api.listWebhookDeliveries(JOB, { limit: 5 })],
  retryWebhookDelivery: [(api) => api.retryWebhookDelivery(JOB, JOB)],
  listModels: [(api) => api.listModels()],
  listTools: [(api) => api.listTools()],
  usage: [(api) => api.usage({ from: "2026-03-01", to: "2026-03-02" })],
  createToken: [(api) => api.createToken({ scope: "read" })],
};

interface DocOperation {
  operationId: string;
  method: string;
  path: string;
  pattern: RegExp;
  /** Success statuses in the document's order. */
  statuses: number[];
  json: boolean;
  queryParameters: string[];
}

const document = await gatewayOpenApiDocument();

function documentOperations(): DocOperation[] {
  const doc = document as {
    paths: Record<string, Record<string, Record<string, unknown>>>;
  };
  const out: DocOperation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const responses = op.responses as Record<string, { content?: Record<string, unknown> }>;
      const statuses = Object.keys(responses)
        .map(Number)
        .filter((s) => s < 300);
      const parameters = (op.parameters ?? []) as Array<{ name: string; in: string }>;
      out.push({
        operationId: op.operationId as string,
        method: method.toUpperCase(),
        path,
        // `{path}` (an artifact's) spans segments; every other parameter is one.
        pattern: new RegExp(`^${path.replace(/\{([^}]+)\}/g, (_, name) => (name === "path" ? ".+" : "[^/]+"))}$`),
        statuses,
        json: statuses.some((s) => responses[String(s)]?.content?.["application/json"] !== undefined),
        queryParameters: parameters.filter((p) => p.in === "query").map((p) => p.name),
      });
    }
  }
  return out;
}

const operations = documentOperations();
const sockets: string[] = [];

interface Hit {
  call: string;
  operation: DocOperation;
  query: URLSearchParams;
  status: number;
  body: unknown;
}

function operationOf(method: string, url: string): DocOperation {
  const { pathname } = new URL(url);
  const op = operations.find((o) => o.method === method && o.pattern.test(pathname));
  if (!op) throw new Error(`${method} ${pathname} is no operation of the OpenAPI document`);
  return op;
}

async function run(): Promise<{ hits: Hit[]; results: Array<{ call: string; hits: Hit[]; result: unknown }> }> {
  const hits: Hit[] = [];
  let current = "";
  let n = 0;
  const fetchImpl = (async (url: string, init: RequestInit = {}) => {
    const operation = operationOf(init.method ?? "GET", url);
    const status = operation.statuses[0] as number;
    // A body no real answer has, so a call that unwraps or reshapes it cannot pass as returning it.
    const body = operation.json ? { body_of: operation.operationId, n: ++n } : null;
    hits.push({ call: current, operation, query: new URL(url).searchParams, status, body });
    if (!operation.json) return new Response(null, { status: SSE_FINISHED_STATUS });
    return Response.json(body, { status });
  }) as unknown as typeof fetch;
  const Recording = class implements WebSocketLike {
    readyState = 0;
    constructor(url: string) {
      sockets.push(url);
      const http = url.replace(/^ws/, "http");
      hits.push({
        call: current,
        operation: operationOf("GET", http),
        query: new URL(http).searchParams,
        status: 101,
        body: null,
      });
    }
    addEventListener(): void {}
    send(): void {}
    close(): void {}
  };
  const api = new EarClient({ baseUrl: "https://g.test", credential: TOKEN, fetch: fetchImpl, WebSocket: Recording });
  const results: Array<{ call: string; hits: Hit[]; result: unknown }> = [];
  for (const [call, invocations] of Object.entries(CALLS)) {
    for (const invoke of invocations) {
      current = call;
      sockets.length = 0;
      const before = hits.length;
      const result = await invoke(api);
      results.push({ call, hits: hits.slice(before), result });
    }
  }
  return { hits, results };
}

describe("the client covers the OpenAPI document", () => {
  it("every operation is some client call's or excused; every call is a documented operation", async () => {
    const { hits, results } = await run();
    for (const r of results) expect(r.hits.length, `${r.call} made no request`).toBeGreaterThan(0);
    const covered = new Set(hits.map((h) => h.operation.operationId));
    const missing = operations
      .map((o) => o.operationId)
      .filter((id) => !covered.has(id) && !(id in NOT_CLIENT_OPERATIONS));
    expect(missing, "operations no client call makes (add a call, or excuse them with a reason)").toEqual([]);
    const excusedButCovered = Object.keys(NOT_CLIENT_OPERATIONS).filter((id) => covered.has(id));
    expect(excusedButCovered).toEqual([]);
    const stale = Object.keys(NOT_CLIENT_OPERATIONS).filter((id) => !operations.some((o) => o.operationId === id));
    expect(stale, "excused operations the document no longer has").toEqual([]);
  });

  it("every documented query parameter of a covered operation is sent by some call, or excused", async () => {
    const { hits } = await run();
    const sent = new Set(hits.flatMap((h) => [...h.query.keys()].map((k) => `${h.operation.operationId}.${k}`)));
    const unsent = [...new Set(hits.map((h) => h.operation))]
      .flatMap((o) => o.queryParameters.map((p) => `${o.operationId}.${p}`))
      .filter((p) => !sent.has(p) && !(p in NOT_SENT_PARAMETERS));
    expect(unsent, "query parameters no client call sends (send them, or excuse them with a reason)").toEqual([]);
    const undocumented = [...sent].filter((p) => {
      const [id, name] = p.split(".") as [string, string];
      return !operations.find((o) => o.operationId === id)?.queryParameters.includes(name) && name !== "access_token";
    });
    expect(undocumented).toEqual([]);
  });

  it("every JSON call returns its route's body exactly, plus `created` where a repeat answers 200 instead of 202", async () => {
    const { results } = await run();
    const checked: string[] = [];
    for (const { call, hits, result } of results) {
      const [hit] = hits;
      if (!hit?.operation.json) continue;
      expect(hits, `${call} makes one request`).toHaveLength(1);
      const repeatable = hit.operation.statuses.includes(200) && hit.operation.statuses.includes(202);
      const expected = repeatable ? { ...(hit.body as object), created: hit.status !== 200 } : hit.body;
      expect(result, `${call} returns ${hit.operation.operationId}'s body`).toEqual(expected);
      checked.push(call);
    }
    // Everything but the two streams, the deletes (204, no body) and an artifact's bytes is a JSON call.
    expect([...new Set(checked)].sort()).toEqual(
      Object.keys(CALLS)
        .filter((c) => c !== "events" && c !== "chat" && c !== "artifact" && !c.startsWith("delete"))
        .sort(),
    );
  });
});

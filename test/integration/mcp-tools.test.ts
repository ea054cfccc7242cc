/**
 * MCP tools of an agent, end to end on the host: a real MCP server started here with the
 * official SDK (test/helpers/mcp-server.ts), the provider a test-started OpenAI-compatible server
 * that scripts the model's tool calls and records what it received (test/helpers/fake-provider.ts).
 * Proven: the allowed tools reach the model with the server's schemas and no other tool does;
 * each call carries the fencing identity (headers and `_meta`); the result, an isError result and
 * an unreachable server all come back to the model as tool results and the job completes; a
 * cancel during a slow call cancels it at the server and ends the job promptly; a timeout
 * cancels it too; an operator secret reaches the server as a header and nowhere else.
 * One in-process host without a sandbox (MCP tools need none), real Postgres, redis-server.
 */
import { randomUUID } from "node:crypto";
import { createServer } from "node:net";
import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningHost, startHost } from "../../sandbox-host/host";
import { HostConfigSchema } from "../../sandbox-host/host-config";
import { silentLogger } from "../../sandbox-host/log";
import { MCP_MESSAGE_MAX_BYTES } from "../../sandbox-host/mcp/fetch";
import { mcpConfigFromEnv } from "../../sandbox-host/mcp/mcp-config";
import { hostModelsFromEnv } from "../../sandbox-host/model/provider-config";
import { createModelRouter } from "../../sandbox-host/model/router";
import { type AgentDefinitionInput, AgentDefinitionSchema, agentModels } from "../../src/contracts/agent";
import type { EventEnvelope } from "../../src/contracts/events";
import { requestCancel } from "../../src/db/control-repo";
import { toJobView } from "../../src/db/job-view";
import * as schema from "../../src/db/schema";
import { decideApproval } from "../../src/db/wait-repo";
import { toolNames } from "../../src/domain/approval";
import { redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { waitFor } from "../../tools/stack/services/ports";
import type { TestDb } from "../helpers/db";
import { type FakeProvider, startFakeProvider, textReply } from "../helpers/fake-provider";
import { type HostServices, startHostServices } from "../helpers/host-services";
import { BIG_RESULT_CHARS, startTestMcpServer, type TestMcpServer } from "../helpers/mcp-server";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

const TENANT = "t-mcp";
const BRIDGE_TOKEN = "mcp-tools-bridge-token";
const SECRET = "ghp_operator-held-secret-4f1c9a";
const MINE_SECRET = "ghp_scoped-to-this-tenant-77d0";
const OTHERS_SECRET = "ghp_scoped-to-other-tenants-5be2";

let services: HostServices;
let t: TestDb;
let host: RunningHost;
let provider: FakeProvider;
let mcp: TestMcpServer;
/** A loopback URL nothing listens on (allowed by the operator: the server is just down). */
let deadUrl: string;

async function freePortUrl(): Promise<string> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const { port } = srv.address() as { port: number };
  await new Promise<void>((r) => srv.close(() => r()));
  return `http://127.0.0.1:${port}/mcp`;
}

if (canRun) {
  beforeAll(async () => {
    [services, provider, mcp, deadUrl] = await Promise.all([
      startHostServices({ bridgeToken: BRIDGE_TOKEN }),
      startFakeProvider(),
      startTestMcpServer(),
      freePortUrl(),
    ]);
    t = await services.pgStack.freshDb(9);
    await t.db.insert(schema.tenants).values({ id: TENANT, name: "mcp" });
    const models = hostModelsFromEnv({
      MODEL_REGISTRY: JSON.stringify({
        default: "mcp-model",
        models: [{ name: "mcp-model", base_url: provider.url, api_key_env: "P_KEY" }],
      }),
      P_KEY: "provider-key",
    });
    const config = HostConfigSchema.parse({
      hostId: `mcp-host-${randomUUID().slice(0, 8)}`,
      databaseUrl: t.url,
      redis: { url: services.bridge.url, token: BRIDGE_TOKEN },
      gatewayUrl: services.ingest.url,
      signingSecret: "mcp-host-signing-secret-0123456789",
      heartbeatMs: 500,
      shutdownGraceMs: 0,
      sandboxEnabled: false,
    });
    host = await startHost(config, {
      model: createModelRouter(models),
      models: models.catalog,
      sandbox: null,
      log: silentLogger,
      mcp: mcpConfigFromEnv({
        MCP_ALLOWED_URLS: `${mcp.url},${deadUrl}`,
        MCP_SECRETS: JSON.stringify({
          probe_token: SECRET,
          // Scoped: a run of TENANT may send the first, never the second.
          mine_token: { value: MINE_SECRET, tenants: [TENANT] },
          others_token: { value: OTHERS_SECRET, tenants: ["t-other", "t-third"] },
        }),
      }),
    });
  }, 120_000);
  afterAll(async () => {
    await host?.close({ graceMs: 0 });
    await Promise.all([provider?.close(), mcp?.close()]);
    await services?.stop();
  });
}

let agentCount = 0;
/** A job naming a new agent (version 1) with this definition, as the gateway writes one. */
async function submit(marker: string, def: Omit<AgentDefinitionInput, "model">): Promise<string> {
  const name = `mcp-agent-${++agentCount}`;
  const definition = AgentDefinitionSchema.parse({ model: "mcp-model", ...def });
  await t.db.insert(schema.agents).values({ tenantId: TENANT, name, latestVersion: 1 });
  await t.db.insert(schema.agentVersions).values({ tenantId: TENANT, name, version: 1, definition });
  const id = randomUUID();
  await t.db.insert(schema.jobs).values({
    id,
    tenantId: TENANT,
    input: { messages: [{ role: "user", content: marker }] },
    agentName: name,
    agentVersion: 1,
    model: agentModels(definition)[0],
    tools: toolNames(definition.tools),
  });
  return id;
}

async function ended(id: string, timeoutMs = 30_000) {
  return waitFor(
    `job ${id} to end`,
    async () => {
      const [row] = await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, id));
      return row && !["queued", "running", "waiting"].includes(row.state) ? row : null;
    },
    { timeoutMs, intervalMs: 25 },
  );
}

const eventsOf = (id: string): EventEnvelope[] => services.ingest.events.filter((e) => e.job_id === id);
async function deliveredEvents(id: string) {
  await waitFor(`job ${id}'s terminal event`, async () =>
    eventsOf(id).some((e) => ["run.completed", "run.failed", "run.cancelled"].includes(e.type)),
  );
  return eventsOf(id);
}

const requestsWith = (marker: string) =>
  provider.requests.filter((r) => JSON.stringify(r.body.messages).includes(marker));
const toolNamesOf = (body: { tools?: Array<{ function: { name: string } }> }) =>
  (body.tools ?? []).map((tool) => tool.function.name);
/** The tool message answering `callId` in a request's messages. */
const toolMessage = (
  body: { messages: Array<{ role: string; tool_call_id?: string; content: string }> },
  callId: string,
) => body.messages.find((m) => m.role === "tool" && m.tool_call_id === callId)?.content;

/** Turn 1 calls the tools given; turn 2 answers `final`. Matched by the job's marker. */
function scriptTools(marker: string, calls: Array<{ id: string; name: string; args: unknown }>, final = "all done") {
  const previous = provider.script;
  provider.script = (req, n) => {
    if (!JSON.stringify(req.body.messages).includes(marker)) return previous(req, n);
    const hasToolResult = req.body.messages.some((m: { role: string }) => m.role === "tool");
    return hasToolResult ? textReply(final) : { kind: "stream", toolCalls: calls, usage: null };
  };
}

describe.skipIf(!canRun)("MCP tools of an agent", () => {
  it("offers only the allowed tools with the server's schemas; a call carries the fencing identity and its result reaches the model", async () => {
    const marker = "fencing marker";
    scriptTools(marker, [
      { id: "call-echo-1", name: "files__echo", args: { text: "hello" } },
      { id: "call-hidden-1", name: "files__hidden", args: {} },
    ]);
    const id = await submit(marker, {
      mcp_servers: [{ name: "files", url: mcp.url, tools: ["echo", { name: "fail", requires_approval: false }] }],
    });
    const row = await ended(id);
    expect({ state: row.state, output: row.output }).toEqual({ state: "completed", output: "all done" });

    const [turn1, turn2, ...more] = requestsWith(marker);
    expect(more).toEqual([]);
    // Exactly the allow-list, in its order, with the server's own input schema; `hidden` and
    // `slow` exist on the server and are never offered.
    expect(toolNamesOf(turn1?.body)).toEqual(["files__echo", "files__fail"]);
    const echoSpec = turn1?.body.tools[0].function;
    expect(echoSpec.description).toBe("Echo the text back.");
    expect(echoSpec.parameters).toMatchObject({
      type: "object",
      properties: { text: { type: "string", description: "what to echo" } },
      required: ["text"],
    });
    expect(toolNamesOf(turn2?.body)).toEqual(["files__echo", "files__fail"]);

    // The result came back as the tool message; the call outside the allow-list never reached the server.
    expect(toolMessage(turn2?.body, "call-echo-1")).toBe("echo: hello");
    expect(JSON.parse(toolMessage(turn2?.body, "call-hidden-1") ?? "{}")).toEqual({
      error: { code: "invalid_input", message: 'unknown tool "files__hidden"' },
    });
    const mine = mcp.calls.filter((c) => c.meta?.["ear/job_id"] === id);
    expect(mine.map((c) => c.tool)).toEqual(["echo"]);
    expect(mcp.calls.some((c) => c.tool === "hidden")).toBe(false);

    // The fencing identity: the execution that ran it, its epoch, and job id + tool call id.
    const [execution] = await t.db.select().from(schema.executions).where(eq(schema.executions.jobId, id));
    const call = mine[0];
    expect(call?.meta).toEqual({
      "ear/job_id": id,
      "ear/execution_id": execution?.id,
      "ear/epoch": execution?.epoch,
      "ear/idempotency_key": `${id}:call-echo-1`,
    });
    expect({
      job: call?.headers["x-ear-job-id"],
      execution: call?.headers["x-ear-execution-id"],
      epoch: call?.headers["x-ear-epoch"],
      key: call?.headers["x-ear-idempotency-key"],
    }).toEqual({ job: id, execution: execution?.id, epoch: String(execution?.epoch), key: `${id}:call-echo-1` });

    // The events name the server on MCP calls.
    const events = await deliveredEvents(id);
    const calls = events.filter((e) => e.type === "tool.call").map((e) => e.payload);
    expect(calls).toEqual([
      { id: "call-echo-1", name: "files__echo", args: { text: "hello" }, server: "files" },
      { id: "call-hidden-1", name: "files__hidden", args: {} },
    ]);
    const results = events.filter((e) => e.type === "tool.result").map((e) => e.payload);
    expect(results[0]).toEqual({
      id: "call-echo-1",
      ok: true,
      output: { content: [{ type: "text", text: "echo: hello" }], truncated: false },
      server: "files",
    });
  });

  it("gives the model an isError result and an unreachable server as tool errors; the job completes", async () => {
    const marker = "errors marker";
    scriptTools(marker, [
      { id: "call-fail", name: "files__fail", args: {} },
      { id: "call-gone", name: "gone__echo", args: { text: "anyone?" } },
    ]);
    const id = await submit(marker, {
      mcp_servers: [
        { name: "files", url: mcp.url, tools: ["fail"] },
        { name: "gone", url: deadUrl, tools: ["echo"], timeout_ms: 2000 },
      ],
    });
    const row = await ended(id);
    expect({ state: row.state, output: row.output }).toEqual({ state: "completed", output: "all done" });
    const [turn1, turn2] = requestsWith(marker);
    // The down server's allowed tool is still offered, saying why it cannot work, so a call is
    // answered with the reason instead of the tool silently missing.
    expect(toolNamesOf(turn1?.body)).toEqual(["files__fail", "gone__echo"]);
    expect(turn1?.body.tools[1].function.description).toContain("unavailable");
    expect(JSON.parse(toolMessage(turn2?.body, "call-fail") ?? "{}")).toEqual({
      error: { code: "mcp_tool_error", message: "the widget is broken" },
    });
    const gone = JSON.parse(toolMessage(turn2?.body, "call-gone") ?? "{}");
    expect(gone.error.code).toBe("mcp_unreachable");
    expect(gone.error.message).toMatch(/MCP server "gone" is unreachable: .*ECONNREFUSED/);
    const results = (await deliveredEvents(id)).filter((e) => e.type === "tool.result").map((e) => e.payload);
    expect(results.map((r) => [r.ok, (r.output as { code: string }).code, r.server])).toEqual([
      [false, "mcp_tool_error", "files"],
      [false, "mcp_unreachable", "gone"],
    ]);
  });

  it("cancels a slow call when the job is cancelled: the server's handler is aborted and the job ends promptly", async () => {
    const marker = "cancel marker";
    scriptTools(marker, [{ id: "call-slow", name: "files__slow", args: {} }]);
    const id = await submit(marker, { mcp_servers: [{ name: "files", url: mcp.url, tools: ["slow"] }] });
    const slow = await waitFor("the slow call at the server", async () =>
      mcp.calls.find((c) => c.tool === "slow" && c.meta?.["ear/job_id"] === id),
    );
    const asked = Date.now();
    expect(await requestCancel(t.db, TENANT, id)).toBe("requested");
    await createRedisClient({ url: services.bridge.url, token: BRIDGE_TOKEN }).set(redisKeys().cancelHint(id), "1", {
      ex: 60,
    });
    const row = await ended(id, 10_000);
    expect(row.state).toBe("cancelled");
    expect(Date.now() - asked).toBeLessThan(5000);
    // The SDK's notifications/cancelled reached the server and aborted the handler.
    await waitFor("the server to see the cancellation", async () => slow.aborted !== undefined, { timeoutMs: 5000 });
    expect(slow.aborted?.at ?? Infinity).toBeLessThan(asked + 5000);
    // The reason is the run's, carried by notifications/cancelled (a closed session would say otherwise).
    expect(slow.aborted?.reason).toBe("Error: cancelled");
    expect(requestsWith(marker)).toHaveLength(1);
  });

  it("cancels a call past the server's timeout_ms at the server and tells the model; the job completes", async () => {
    const marker = "timeout marker";
    scriptTools(marker, [{ id: "call-late", name: "files__slow", args: {} }]);
    const id = await submit(marker, {
      mcp_servers: [{ name: "files", url: mcp.url, tools: ["slow"], timeout_ms: 300 }],
    });
    const row = await ended(id);
    expect(row.state).toBe("completed");
    const late = JSON.parse(toolMessage(requestsWith(marker)[1]?.body, "call-late") ?? "{}");
    expect(late).toEqual({
      error: {
        code: "mcp_timeout",
        message: 'MCP server "files" did not answer within 300 ms; the call was cancelled',
      },
    });
    const call = mcp.calls.find((c) => c.tool === "slow" && c.meta?.["ear/job_id"] === id);
    await waitFor("the server to see the cancellation", async () => call?.aborted !== undefined, { timeoutMs: 5000 });
    expect(call?.aborted?.reason).toMatch(/timed out/i);
  });

  it("sends an operator secret as the named header; it appears in no event, job view or model request, even when the server echoes it", async () => {
    const marker = "secret marker";
    scriptTools(marker, [
      { id: "call-s", name: "vault__echo", args: { text: "x" } },
      { id: "call-who", name: "vault__whoami", args: {} },
    ]);
    const id = await submit(marker, {
      mcp_servers: [
        {
          name: "vault",
          url: mcp.url,
          headers: { Authorization: { secret: "probe_token" } },
          tools: ["echo", "whoami"],
        },
      ],
    });
    const row = await ended(id);
    expect(row.state).toBe("completed");
    const calls = mcp.calls.filter((c) => c.meta?.["ear/job_id"] === id);
    expect(calls.map((c) => [c.tool, c.headers.authorization])).toEqual([
      ["echo", SECRET],
      ["whoami", SECRET],
    ]);
    // The server echoed it; the model read it redacted.
    expect(toolMessage(requestsWith(marker)[1]?.body, "call-who")).toBe("authorization: [redacted]");
    const events = await deliveredEvents(id);
    expect(events.filter((e) => e.type === "tool.result")).toHaveLength(2);
    expect(JSON.stringify(events)).not.toContain(SECRET);
    expect(JSON.stringify(toJobView(row))).not.toContain(SECRET);
    expect(JSON.stringify(requestsWith(marker))).not.toContain(SECRET);
  });

  it("keeps the secret out of what the model and the events get when a server's error page echoes it", async () => {
    const marker = "echoed secret marker";
    scriptTools(marker, [{ id: "call-r", name: "rej__echo", args: { text: "x" } }]);
    const id = await submit(marker, {
      mcp_servers: [
        {
          name: "rej",
          url: `${mcp.url}/reject`,
          headers: { Authorization: { secret: "probe_token" } },
          tools: ["echo"],
        },
      ],
    });
    const row = await ended(id);
    expect(row.state).toBe("completed");
    const [turn1, turn2] = requestsWith(marker);
    expect(turn1?.body.tools[0].function.description).toContain("bad token: [redacted]");
    const error = JSON.parse(toolMessage(turn2?.body, "call-r") ?? "{}").error;
    expect(error.code).toBe("mcp_protocol_error");
    expect(error.message).toContain("bad token: [redacted]");
    expect(JSON.stringify(requestsWith(marker))).not.toContain(SECRET);
    expect(JSON.stringify(await deliveredEvents(id))).not.toContain(SECRET);
  });

  it("follows no redirect out of MCP_ALLOWED_URLS: the secret never reaches the other path, and the tool answers why", async () => {
    const marker = "redirect marker";
    scriptTools(marker, [{ id: "call-redir", name: "redir__echo", args: { text: "x" } }]);
    const id = await submit(marker, {
      mcp_servers: [
        {
          name: "redir",
          // Allowed (under `…/mcp`); it answers `307 Location: /admin/mcp`, same origin, not allowed.
          url: `${mcp.url}/r`,
          headers: { Authorization: { secret: "probe_token" } },
          tools: ["echo"],
        },
      ],
    });
    const row = await ended(id);
    expect(row.state).toBe("completed");
    const mine = mcp.requests.filter((r) => r.headers["x-ear-job-id"] === id);
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.filter((r) => r.path !== "/mcp/r")).toEqual([]);
    expect(mcp.requests.filter((r) => r.path.startsWith("/admin")).map((r) => r.headers.authorization)).toEqual([]);
    const origin = new URL(mcp.url).origin;
    expect(JSON.parse(toolMessage(requestsWith(marker)[1]?.body, "call-redir") ?? "{}")).toEqual({
      error: {
        code: "mcp_not_allowed",
        message: `MCP server "redir" redirected to ${origin}/admin/mcp, which is not a URL the operator allows MCP calls to (MCP_ALLOWED_URLS): not followed`,
      },
    });
  });

  it("stops reading a 30 MB result at MCP_MESSAGE_MAX_BYTES and answers a clear tool error; the job completes", async () => {
    const marker = "big result marker";
    scriptTools(marker, [{ id: "call-big", name: "files__big", args: {} }]);
    // The host's fetch is the global one: count the bytes the host pulls from the body of the
    // big call's answer (pulled, not sent: only what the reader asked for is counted).
    const realFetch = globalThis.fetch;
    let read = 0;
    globalThis.fetch = async (input, init) => {
      const response = await realFetch(input, init);
      if (typeof init?.body !== "string" || !init.body.includes('"name":"big"') || response.body === null) {
        return response;
      }
      const reader = response.body.getReader();
      const counted = new ReadableStream<Uint8Array>(
        {
          async pull(controller) {
            const { value, done } = await reader.read();
            if (done) return controller.close();
            read += value.length;
            controller.enqueue(value);
          },
          cancel: (reason) => reader.cancel(reason),
        },
        { highWaterMark: 0 },
      );
      return new Response(counted, { status: response.status, headers: response.headers });
    };
    try {
      const id = await submit(marker, { mcp_servers: [{ name: "files", url: mcp.url, tools: ["big"] }] });
      const row = await ended(id, 60_000);
      expect({ state: row.state, output: row.output }).toEqual({ state: "completed", output: "all done" });
      // The server sent 30 MB; the host read the bound and at most one more chunk of it.
      expect(read).toBeLessThan(BIG_RESULT_CHARS / 4);
      expect(read).toBeGreaterThan(MCP_MESSAGE_MAX_BYTES);
      expect(read).toBeLessThan(MCP_MESSAGE_MAX_BYTES + 512 * 1024);
      expect(toolMessage(requestsWith(marker)[1]?.body, "call-big")).toBe(
        JSON.stringify({
          error: {
            code: "mcp_result_too_large",
            message: `MCP server "files" answered more than ${MCP_MESSAGE_MAX_BYTES} bytes in one message; the host stopped reading it`,
          },
        }),
      );
    } finally {
      globalThis.fetch = realFetch;
    }
  });

  it("answers a secret this host does not hold as a tool error naming it, and never calls the server", async () => {
    const marker = "unknown secret marker";
    scriptTools(marker, [{ id: "call-u", name: "nokey__echo", args: { text: "x" } }]);
    const before = mcp.sessions.length;
    const id = await submit(marker, {
      mcp_servers: [{ name: "nokey", url: mcp.url, headers: { "X-Api-Key": { secret: "not_held" } }, tools: ["echo"] }],
    });
    const row = await ended(id);
    expect(row.state).toBe("completed");
    expect(JSON.parse(toolMessage(requestsWith(marker)[1]?.body, "call-u") ?? "{}")).toEqual({
      error: {
        code: "mcp_unknown_secret",
        message:
          'header X-Api-Key names the secret "not_held", which this host does not hold for this tenant (MCP_SECRETS)',
      },
    });
    expect(mcp.calls.some((c) => c.meta?.["ear/job_id"] === id)).toBe(false);
    expect(mcp.sessions.length).toBe(before);
  });

  it("never sends a secret scoped to other tenants: the same tool error as a secret not held; one scoped to this tenant is sent", async () => {
    const marker = "scoped secret marker";
    scriptTools(marker, [
      { id: "call-theirs", name: "theirs__whoami", args: {} },
      { id: "call-mine", name: "mine__whoami", args: {} },
    ]);
    const requestsBefore = mcp.requests.length;
    const id = await submit(marker, {
      mcp_servers: [
        { name: "theirs", url: mcp.url, headers: { Authorization: { secret: "others_token" } }, tools: ["whoami"] },
        { name: "mine", url: mcp.url, headers: { Authorization: { secret: "mine_token" } }, tools: ["whoami"] },
      ],
    });
    const row = await ended(id);
    expect(row.state).toBe("completed");
    const turn2 = requestsWith(marker)[1]?.body;
    expect(JSON.parse(toolMessage(turn2, "call-theirs") ?? "{}")).toEqual({
      error: {
        code: "mcp_unknown_secret",
        message:
          'header Authorization names the secret "others_token", which this host does not hold for this tenant (MCP_SECRETS)',
      },
    });
    expect(toolMessage(turn2, "call-mine")).toBe("authorization: [redacted]");
    const sent = mcp.requests.slice(requestsBefore).map((r) => r.headers.authorization);
    expect(sent).toContain(MINE_SECRET);
    expect(sent).not.toContain(OTHERS_SECRET);
    expect(mcp.calls.filter((c) => c.meta?.["ear/job_id"] === id).map((c) => c.tool)).toEqual(["whoami"]);
  });
});

describe.skipIf(!canRun)("an MCP tool marked requires_approval", () => {
  const waiting = (id: string) =>
    waitFor(`job ${id} to wait`, async () => {
      const [row] = await t.db.select().from(schema.jobs).where(eq(schema.jobs.id, id));
      return row?.state === "waiting" ? row : null;
    });
  const gated = () => ({
    mcp_servers: [{ name: "files", url: mcp.url, tools: [{ name: "echo", requires_approval: true }] }],
  });

  it("waits without calling the server; approved, the resumed execution calls it once with the same idempotency key", async () => {
    const marker = "approve mcp marker";
    scriptTools(marker, [{ id: "call-gated", name: "files__echo", args: { text: "ship it" } }]);
    const id = await submit(marker, gated());
    const row = await waiting(id);
    expect(row.waitingFor).toMatchObject({ kind: "approval", call_id: "call-gated", tool: "files__echo" });
    expect(mcp.calls.some((c) => c.meta?.["ear/job_id"] === id)).toBe(false);

    expect((await decideApproval(t.db, TENANT, id, "call-gated", "approve", null)).status).toBe("recorded");
    const done = await ended(id);
    expect({ state: done.state, output: done.output }).toEqual({ state: "completed", output: "all done" });
    const calls = mcp.calls.filter((c) => c.meta?.["ear/job_id"] === id);
    expect(calls.map((c) => c.tool)).toEqual(["echo"]);
    // Made by the execution that resumed (a later epoch than the one that suspended).
    const executions = await t.db.select().from(schema.executions).where(eq(schema.executions.jobId, id));
    const resumed = executions.reduce((a, b) => (b.epoch > a.epoch ? b : a));
    expect(executions).toHaveLength(2);
    expect(calls[0]?.meta).toEqual({
      "ear/job_id": id,
      "ear/execution_id": resumed.id,
      "ear/epoch": resumed.epoch,
      "ear/idempotency_key": `${id}:call-gated`,
    });
    expect(toolMessage(requestsWith(marker).at(-1)?.body, "call-gated")).toBe("echo: ship it");
  });

  it("denied, the server never sees the call and the model gets the note", async () => {
    const marker = "deny mcp marker";
    scriptTools(marker, [{ id: "call-denied", name: "files__echo", args: { text: "rm -rf" } }]);
    const id = await submit(marker, gated());
    await waiting(id);
    expect((await decideApproval(t.db, TENANT, id, "call-denied", "deny", "not today")).status).toBe("recorded");
    const done = await ended(id);
    expect(done.state).toBe("completed");
    expect(mcp.calls.some((c) => c.meta?.["ear/job_id"] === id)).toBe(false);
    expect(toolMessage(requestsWith(marker).at(-1)?.body, "call-denied")).toContain("not today");
  });
});

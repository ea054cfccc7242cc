/**
 * MCP tools through the public API on the real stack (the gateway in workerd, Postgres, Redis, a
 * spawned sandbox-host process, the mock model): the gateway and the host get the operator's
 * settings as deployed (MCP_ALLOWED_URLS on both, MCP_SECRET_NAMES on the gateway, the secrets in
 * MCP_SECRETS_FILE read by the host at startup), the gateway refuses what they do not allow, and a
 * job's MCP call reaches a real MCP server (the official SDK's, on loopback) with the secret as
 * its header, while the job view and the event stream name the server and never the secret.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import { readSse, type SseEvent } from "../../tools/lib/sse";
import { waitFor } from "../../tools/stack/services/ports";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient } from "../helpers/api";
import { startTestMcpServer, type TestMcpServer } from "../helpers/mcp-server";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

const SECRET = "e2e-operator-secret-7d2b0c";

describe.skipIf(!canRun)("MCP tools end to end (gateway + host process)", () => {
  let stack: Stack;
  let mcp: TestMcpServer;
  let dir: string;
  let api: ReturnType<typeof apiClient>;
  beforeAll(async () => {
    mcp = await startTestMcpServer();
    dir = await mkdtemp(join(tmpdir(), "ear-mcp-e2e-"));
    const secretsFile = join(dir, "mcp-secrets.json");
    await writeFile(secretsFile, JSON.stringify({ probe_token: SECRET }));
    const allowed = new URL("/mcp", mcp.url).toString();
    stack = await startStack({
      hosts: 1,
      gatewayVars: { MCP_ALLOWED_URLS: allowed, MCP_SECRET_NAMES: "probe_token" },
      hostEnv: { MCP_ALLOWED_URLS: allowed, MCP_SECRETS_FILE: secretsFile, SANDBOX_ENABLED: "false" },
    });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
    await mcp?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  const server = () => ({
    name: "files",
    url: mcp.url,
    headers: { Authorization: { secret: "probe_token" } },
    tools: ["echo"],
  });

  it("refuses a server the operator does not allow and a secret it does not hold", async () => {
    const elsewhere = await api.call("POST", "/v1/agents", {
      name: "mcp-elsewhere",
      model: stack.modelName,
      mcp_servers: [{ ...server(), url: "http://169.254.169.254/latest/meta-data" }],
    });
    expect(elsewhere.status).toBe(400);
    expect((elsewhere.body as { error: { message: string } }).error.message).toBe(
      "mcp_servers.0.url: not a URL the operator allows MCP calls to (MCP_ALLOWED_URLS)",
    );
    const unknown = await api.call("POST", "/v1/agents", {
      name: "mcp-unknown",
      model: stack.modelName,
      mcp_servers: [{ ...server(), headers: { Authorization: { secret: "root_password" } } }],
    });
    expect(unknown.status).toBe(400);
    expect((unknown.body as { error: { message: string } }).error.message).toBe(
      'mcp_servers.0.headers.Authorization: unknown secret "root_password" (not one of the operator\'s MCP secrets this tenant may use)',
    );
  });

  it("runs a job's MCP call with the operator's secret as its header; the job view and events name the server, never the secret", async () => {
    const created = await api.call<{ agent: { mcp_servers: unknown } }>("POST", "/v1/agents", {
      name: "mcp-agent",
      model: stack.modelName,
      mcp_servers: [server()],
    });
    expect(created.status).toBe(201);
    expect(created.body.agent.mcp_servers).toEqual([{ ...server(), timeout_ms: 30_000 }]);

    const submitted = await api.call<{ job: JobView }>("POST", "/v1/jobs", {
      agent: "mcp-agent",
      input: {
        messages: [
          {
            role: "user",
            content: `!mock ${JSON.stringify({ tool_calls: [{ name: "files__echo", args: { text: "e2e" } }] })}`,
          },
        ],
      },
    });
    expect(submitted.status).toBe(202);
    const id = submitted.body.job.id;
    const job = await waitFor(
      `job ${id} to finish`,
      async () => {
        const { body } = await api.call<{ job: JobView }>("GET", `/v1/jobs/${id}`);
        return ["queued", "running"].includes(body.job.state) ? null : body.job;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    // The mock answers a tool result with "Echo: <the results>".
    expect({ state: job.state, output: job.output }).toEqual({ state: "completed", output: "Echo: echo: e2e" });

    const call = mcp.calls.find((c) => c.meta?.["ear/job_id"] === id);
    expect(call?.tool).toBe("echo");
    expect(call?.headers.authorization).toBe(SECRET);
    expect(call?.headers["x-ear-job-id"]).toBe(id);

    const events: SseEvent[] = [];
    for await (const ev of readSse(`${stack.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: { authorization: `Bearer ${stack.apiKey}` },
      signal: AbortSignal.timeout(15_000),
    })) {
      events.push(ev);
      if (ev.event === "run.completed") break;
    }
    const toolCall = events.find((e) => e.event === "tool.call");
    expect(JSON.parse(toolCall?.data ?? "{}").payload).toMatchObject({
      name: "files__echo",
      server: "files",
    });
    expect(events.some((e) => e.event === "tool.result")).toBe(true);
    expect(JSON.stringify(events)).not.toContain(SECRET);
    const view = await api.call("GET", `/v1/jobs/${id}`);
    expect(JSON.stringify(view.body)).not.toContain(SECRET);
    const agentView = await api.call("GET", "/v1/agents/mcp-agent");
    expect(JSON.stringify(agentView.body)).not.toContain(SECRET);
  });
});

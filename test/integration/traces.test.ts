/**
 * OpenTelemetry traces from a client's request to the provider, on the real stack (the gateway in
 * workerd, Postgres, Redis, a spawned sandbox-host process configured only by the standard
 * OTEL_* variables, the mock model, a real MCP server) and an OTLP receiver of the test's own. By
 * default a client's W3C traceparent decides nothing: the run's trace is named after the job and
 * sampled by the host, even for a client's flag 00, and its execution span links to the client's
 * span; the model call's span has the gen_ai.* attributes, and the MCP request carries the tool
 * call span's traceparent. With OTEL_TRUST_CLIENT_SAMPLING=true (a second stack) the run joins
 * the client's trace and obeys its flag. The protobuf protocol is checked in-process (the
 * receiver keeps protobuf bodies raw).
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { startTracing } from "../../sandbox-host/tracing/tracing";
import type { JobView } from "../../src/contracts/job";
import { waitFor } from "../../tools/stack/services/ports";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient } from "../helpers/api";
import { startTestMcpServer, type TestMcpServer } from "../helpers/mcp-server";
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from "../helpers/otlp-receiver";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

const hex = (bytes: number) => randomBytes(bytes).toString("hex");

describe.skipIf(!canRun)("traces of a run (gateway + host process + OTLP receiver)", () => {
  let stack: Stack;
  let mcp: TestMcpServer;
  let otlp: OtlpReceiver;
  let api: ReturnType<typeof apiClient>;
  beforeAll(async () => {
    mcp = await startTestMcpServer();
    otlp = await startOtlpReceiver();
    const allowed = new URL("/mcp", mcp.url).toString();
    stack = await startStack({
      hosts: 1,
      gatewayVars: { MCP_ALLOWED_URLS: allowed },
      hostEnv: {
        MCP_ALLOWED_URLS: allowed,
        SANDBOX_ENABLED: "false",
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_SERVICE_NAME: "traces-test-host",
        OTEL_BSP_SCHEDULE_DELAY: "100",
      },
    });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
    await mcp?.close();
    await otlp?.close();
  }, 60_000);

  const finished = (id: string) =>
    waitFor(
      `job ${id} to finish`,
      async () => {
        const { body } = await api.call<{ job: JobView }>("GET", `/v1/jobs/${id}`);
        return ["queued", "running"].includes(body.job.state) ? null : body.job;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
  const spansOf = (traceId: string, until: (spans: ReceivedSpan[]) => boolean) =>
    waitFor(
      `spans of trace ${traceId}`,
      async () => {
        const spans = otlp.spans.filter((s) => s.traceId === traceId);
        return until(spans) ? spans : null;
      },
      { timeoutMs: 20_000, intervalMs: 100 },
    );

  it("a client's traceparent, flag 00 included, is a link: the run's spans are exported in the job's trace (execution, model calls with gen_ai.*, the tool call, the MCP request's traceparent)", async () => {
    const created = await api.call("POST", "/v1/agents", {
      name: "traced",
      model: stack.modelName,
      mcp_servers: [{ name: "files", url: mcp.url, tools: ["echo"] }],
    });
    expect(created.status).toBe(201);
    const clientTrace = hex(16);
    const clientSpan = hex(8);
    const submitted = await api.call<{ job: JobView }>(
      "POST",
      "/v1/jobs",
      {
        agent: "traced",
        input: {
          messages: [
            {
              role: "user",
              content: `!mock ${JSON.stringify({ tool_calls: [{ name: "files__echo", args: { text: "traced" } }] })}`,
            },
          ],
        },
      },
      // Flag 00: the client asks not to be sampled. The operator's sampler (always on) decides.
      { traceparent: `00-${clientTrace}-${clientSpan}-00` },
    );
    expect(submitted.status).toBe(202);
    const traceId = submitted.body.job.id.replaceAll("-", "");
    expect(submitted.body.job.trace_id).toBe(traceId);
    const job = await finished(submitted.body.job.id);
    expect(job.state).toBe("completed");

    const spans = await spansOf(traceId, (s) => s.some((x) => x.name === "execution"));
    const byName = (name: string) => spans.filter((s) => s.name === name);
    const [execution] = byName("execution");
    // A root of the operator's trace, linked to the client's span; nothing is in the client's trace.
    expect(execution?.parentSpanId).toBe("");
    expect(execution?.links).toEqual([
      { traceId: clientTrace, spanId: clientSpan, attributes: { "ear.link": "client" } },
    ]);
    expect(otlp.spans.filter((x) => x.traceId === clientTrace)).toEqual([]);
    expect(execution?.attributes["ear.job.id"]).toBe(job.id);
    expect(execution?.attributes["ear.outcome"]).toBe("completed");
    expect(execution?.resource["service.name"]).toBe("traces-test-host");

    // Two model turns (the tool call, then the answer), each a child of the execution.
    const chats = byName(`chat ${stack.modelName}`);
    expect(chats).toHaveLength(2);
    for (const c of chats) {
      expect(c.parentSpanId).toBe(execution?.spanId);
      expect(c.attributes["gen_ai.operation.name"]).toBe("chat");
      expect(c.attributes["gen_ai.request.model"]).toBe(stack.modelName);
      expect(c.attributes["gen_ai.usage.input_tokens"]).toBeGreaterThan(0);
      expect(c.attributes["gen_ai.usage.output_tokens"]).toBeGreaterThan(0);
    }
    const reasons = chats.map((c) => (c.attributes["gen_ai.response.finish_reasons"] as string[])[0]).sort();
    expect(reasons).toEqual(["stop", "tool_calls"]);
    const tokens = chats.reduce(
      (n, c) => ({
        input: n.input + (c.attributes["gen_ai.usage.input_tokens"] as number),
        output: n.output + (c.attributes["gen_ai.usage.output_tokens"] as number),
      }),
      { input: 0, output: 0 },
    );
    expect(tokens).toEqual({ input: job.usage.prompt_tokens, output: job.usage.completion_tokens });

    const [tool] = byName("execute_tool files__echo");
    expect(tool?.parentSpanId).toBe(execution?.spanId);
    expect(tool?.attributes["gen_ai.tool.name"]).toBe("files__echo");
    expect(tool?.attributes["ear.outcome"]).toBe("ok");
    // The MCP request carried the tool call span's context: the server's spans would join here.
    const call = mcp.calls.find((c) => c.meta?.["ear/job_id"] === job.id);
    expect(call?.headers.traceparent).toBe(`00-${traceId}-${tool?.spanId}-01`);
  });

  it("a child job's execution is a child of its parent's delegate span, in the parent's trace (a host's context is obeyed)", async () => {
    for (const [name, extra] of [
      ["worker", {}],
      ["boss", { delegates: ["worker"] }],
    ] as const) {
      expect((await api.call("POST", "/v1/agents", { name, model: stack.modelName, ...extra })).status).toBe(201);
    }
    const submitted = await api.call<{ job: JobView }>(
      "POST",
      "/v1/jobs",
      {
        agent: "boss",
        input: {
          messages: [
            {
              role: "user",
              content: `!mock ${JSON.stringify({ tool_calls: [{ name: "delegate_worker", args: { input: "sub task" } }] })}`,
            },
          ],
        },
      },
      { traceparent: `00-${hex(16)}-${hex(8)}-01` },
    );
    const traceId = submitted.body.job.trace_id;
    expect(traceId).toBe(submitted.body.job.id.replaceAll("-", ""));
    const parent = await waitFor(
      "the parent to complete",
      async () => {
        const { body } = await api.call<{ job: JobView }>("GET", `/v1/jobs/${submitted.body.job.id}`);
        return body.job.state === "completed" ? body.job : null;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const tree = await api.call<{ tree: { children: Array<{ id: string }> } }>("GET", `/v1/jobs/${parent.id}/tree`);
    const childId = tree.body.tree.children[0]?.id as string;
    const child = (await api.call<{ job: JobView }>("GET", `/v1/jobs/${childId}`)).body.job;
    expect(child.trace_id).toBe(traceId);
    // Two executions of the parent (the delegating one, the resumed one) and the child's.
    const spans = await spansOf(traceId, (s) => s.filter((x) => x.name === "execution").length >= 3);
    const delegate = spans.find((s) => s.name === "delegate worker");
    const childExecution = spans.find((s) => s.name === "execution" && s.attributes["ear.job.id"] === childId);
    expect(delegate?.attributes["gen_ai.agent.name"]).toBe("worker");
    expect(childExecution?.parentSpanId).toBe(delegate?.spanId);
  });

  it("links a chat message's traceparent (a frame field: no headers on a browser's WebSocket)", async () => {
    const clientTrace = hex(16);
    const clientSpan = hex(8);
    const ws = await new Promise<WebSocket>((resolve, reject) => {
      const socket = new WebSocket(`${stack.gatewayUrl.replace(/^http/, "ws")}/v1/conversations/traced-chat/ws`, {
        perMessageDeflate: false,
        headers: { authorization: `Bearer ${stack.apiKey}` },
      });
      socket.once("open", () => resolve(socket));
      socket.once("error", reject);
    });
    try {
      const frame = await new Promise<{ type: string; job?: JobView }>((resolve) => {
        ws.on("message", (data) => {
          const f = JSON.parse(String(data));
          if (f.type === "job" || f.type === "error") resolve(f);
        });
        ws.send(
          JSON.stringify({
            type: "message",
            content: "hi",
            client_message_id: "t1",
            traceparent: `00-${clientTrace}-${clientSpan}-01`,
          }),
        );
      });
      const traceId = frame.job?.id.replaceAll("-", "") as string;
      expect(frame.job?.trace_id).toBe(traceId);
      const spans = await spansOf(traceId, (s) => s.some((x) => x.name === "execution"));
      expect(spans.find((x) => x.name === "execution")?.links).toEqual([
        { traceId: clientTrace, spanId: clientSpan, attributes: { "ear.link": "client" } },
      ]);
    } finally {
      ws.close();
    }
  });

  it("without a traceparent, names the run's trace after the job (the view's trace_id), as a root", async () => {
    const submitted = await api.call<{ job: JobView }>("POST", "/v1/jobs", {
      input: { messages: [{ role: "user", content: "hello" }] },
    });
    const id = submitted.body.job.id;
    expect(submitted.body.job.trace_id).toBe(id.replaceAll("-", ""));
    await finished(id);
    const spans = await spansOf(id.replaceAll("-", ""), (s) => s.some((x) => x.name === "execution"));
    expect(spans.find((s) => s.name === "execution")?.parentSpanId).toBe("");
    // An invalid header is ignored, as the W3C spec says: the job gets a trace of its own.
    const bad = await api.call<{ job: JobView }>(
      "POST",
      "/v1/jobs",
      { input: { messages: [{ role: "user", content: "hello" }] } },
      { traceparent: `00-${"0".repeat(32)}-${hex(8)}-01` },
    );
    expect(bad.status).toBe(202);
    expect(bad.body.job.trace_id).toBe(bad.body.job.id.replaceAll("-", ""));
  });
});

describe.skipIf(!canRun)("traces with OTEL_TRUST_CLIENT_SAMPLING=true (the operator trusts its clients)", () => {
  let stack: Stack;
  let otlp: OtlpReceiver;
  let api: ReturnType<typeof apiClient>;
  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    stack = await startStack({
      hosts: 1,
      gatewayVars: { OTEL_TRUST_CLIENT_SAMPLING: "true" },
      hostEnv: {
        SANDBOX_ENABLED: "false",
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_BSP_SCHEDULE_DELAY: "100",
      },
    });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
    await otlp?.close();
  }, 60_000);

  const run = async (traceparent: string) => {
    const submitted = await api.call<{ job: JobView }>(
      "POST",
      "/v1/jobs",
      { input: { messages: [{ role: "user", content: "hello" }] } },
      { traceparent },
    );
    expect(submitted.status).toBe(202);
    await waitFor(
      "the job to finish",
      async () => {
        const { body } = await api.call<{ job: JobView }>("GET", `/v1/jobs/${submitted.body.job.id}`);
        return ["queued", "running"].includes(body.job.state) ? null : body.job;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    return submitted.body.job;
  };

  it("joins the client's trace as its child, and a client's flag 00 leaves the run unrecorded (the parent-based sampler obeys it)", async () => {
    const [unsampled, sampled] = [hex(16), hex(16)];
    const clientSpan = hex(8);
    const quiet = await run(`00-${unsampled}-${hex(8)}-00`);
    expect(quiet.trace_id).toBe(unsampled);
    const loud = await run(`00-${sampled}-${clientSpan}-01`);
    expect(loud.trace_id).toBe(sampled);
    const execution = await waitFor(
      "the sampled run's execution span",
      async () => otlp.spans.find((s) => s.traceId === sampled && s.name === "execution") ?? null,
      { timeoutMs: 20_000, intervalMs: 100 },
    );
    expect(execution.parentSpanId).toBe(clientSpan);
    expect(execution.links).toEqual([]);
    // The run before it finished first and its spans would have been in an earlier export.
    expect(otlp.spans.filter((s) => s.attributes["ear.job.id"] === quiet.id)).toEqual([]);
  });
});

describe("the tracing switch", () => {
  it("is off without an endpoint, and exports http/protobuf when asked", async () => {
    expect((await startTracing({}, "h")).enabled).toBe(false);
    expect(
      (await startTracing({ OTEL_SDK_DISABLED: "true", OTEL_EXPORTER_OTLP_ENDPOINT: "http://x" }, "h")).enabled,
    ).toBe(false);
    await expect(
      startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://x", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }, "h"),
    ).rejects.toThrow(/not supported/);
    await expect(
      startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://x", OTEL_TRACES_SAMPLER: "sometimes" }, "h"),
    ).rejects.toThrow(/OTEL_TRACES_SAMPLER/);

    const receiver = await startOtlpReceiver();
    // The exporter reads its endpoint from the process environment, as every OTel SDK does.
    const saved = process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.url;
    try {
      const env = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" };
      const tracing = await startTracing(env, "proto-host");
      expect(tracing.enabled).toBe(true);
      const traceId = hex(16);
      tracing.nameNextTrace(traceId);
      tracing.tracer.startSpan("probe").end();
      await tracing.shutdown();
      const req = receiver.requests.find((r) => r.path === "/v1/traces");
      expect(req?.contentType).toBe("application/x-protobuf");
      expect(req?.body.includes(Buffer.from(traceId, "hex"))).toBe(true);
      expect(req?.body.includes(Buffer.from("proto-host"))).toBe(true);
    } finally {
      if (saved === undefined) delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
      else process.env.OTEL_EXPORTER_OTLP_ENDPOINT = saved;
      await receiver.close();
    }
  });
});

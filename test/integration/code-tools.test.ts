/**
 * The hosts' code tools through the whole stack (gateway in workerd, Postgres, Redis, one
 * sandbox-host spawned with HOST_TOOLS = test/fixtures/code-tools/test-tools.ts, the mock
 * model): the catalog (GET /v1/tools), the 400 for an agent naming a tool no host has, a tool
 * blocking its thread for 4 s beside another job's stream (the stream's largest gap between
 * deltas under 1 s), ctx's identity as the job and its execution row know it, a throw and a
 * timeout read by the model while the job completes, a cancel during a call deaf to it, and
 * tool_unavailable for a tool only another host offers (and, once that host's rows are stale, the
 * tool neither listed nor accepted).
 */
import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import {
  CODE_TOOLS_STALE_S,
  publishCodeTools,
  refreshCodeTools,
  unpublishCodeTools,
} from "../../src/db/code-tools-repo";
import * as schema from "../../src/db/schema";
import { readSse, type SseEvent } from "../../tools/lib/sse";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

interface ToolView {
  name: string;
  kind: string;
  description: string;
  input_schema: Record<string, unknown>;
  idempotent: boolean;
  requires_approval: boolean;
  timeout_ms: number | null;
  hosts: number | null;
}

const script = (s: Record<string, unknown>) => ({
  input: { messages: [{ role: "user", content: `!mock ${JSON.stringify(s)}` }] },
});

describe.skipIf(!canRun)("code tools on a host (HOST_TOOLS)", () => {
  const t = useStack({
    hosts: 1,
    mockModel: { ttftMs: 5, tokensPerS: 2000 },
    hostEnv: { HOST_TOOLS: "test/fixtures/code-tools/test-tools.ts", HOST_TOOLS_MEMORY_MB: "64" },
  });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const { defineAgent, submit, finished, job } = agentJobs<JobView>(api, () => t.stack.modelName);

  /** Every event of a job, each with the time this test received it. */
  async function eventsOf(
    id: string,
    until = (e: SseEvent) => e.event.startsWith("run.") && e.event !== "run.started" && e.event !== "run.prepared",
  ) {
    const out: Array<SseEvent & { at: number; payload: Record<string, unknown> }> = [];
    for await (const ev of readSse(`${t.stack.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: { authorization: `Bearer ${t.stack.apiKey}` },
      signal: AbortSignal.timeout(60_000),
    })) {
      out.push({ ...ev, at: performance.now(), payload: JSON.parse(ev.data).payload ?? {} });
      if (until(ev)) break;
    }
    return out;
  }

  it("GET /v1/tools lists the sandbox tools, then the host's code tools with their schemas", async () => {
    const r = await api().call<{ tools: ToolView[] }>("GET", "/v1/tools");
    expect(r.status).toBe(200);
    const byName = new Map(r.body.tools.map((x) => [x.name, x]));
    expect(r.body.tools.slice(0, 4).map((x) => [x.name, x.kind])).toEqual([
      ["shell", "sandbox"],
      ["read_file", "sandbox"],
      ["write_file", "sandbox"],
      ["list_dir", "sandbox"],
    ]);
    expect(
      r.body.tools
        .filter((x) => x.kind === "code")
        .map((x) => x.name)
        .sort(),
    ).toEqual(["big", "boom", "echo", "hog", "ignore_cancel", "quit", "spin", "stuck", "wait_for_cancel", "whoami"]);
    expect(byName.get("echo")).toEqual({
      name: "echo",
      kind: "code",
      description: "Returns its text",
      input_schema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
      idempotent: false,
      requires_approval: false,
      timeout_ms: 30_000,
      hosts: 1,
    });
    expect(byName.get("whoami")?.idempotent).toBe(true);
    expect(byName.get("shell")?.input_schema.required).toEqual(["command"]);
  });

  it("an agent naming a tool no host offers is a 400 naming it; a code tool beside a sandbox tool is accepted", async () => {
    const bad = await api().call<{ error: { code: string; message: string } }>("POST", "/v1/agents", {
      name: "needs-nothing-real",
      model: t.stack.modelName,
      tools: ["echo", "lookup_nowhere"],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toEqual({
      code: "invalid_request",
      message:
        'tools.1: unknown tool "lookup_nowhere" (not a built-in tool, and no host offers a code tool of that name: GET /v1/tools lists them)',
    });
    const malformed = await api().call<{ error: { code: string; message: string } }>("POST", "/v1/agents", {
      name: "bad-name",
      model: t.stack.modelName,
      tools: ["a__b"],
    });
    expect(malformed.status).toBe(400);
    expect(malformed.body.error.message).toMatch(/tools\.0/);
    // Past the old 4-tool limit.
    await defineAgent("many-tools", { tools: ["shell", "read_file", "write_file", "list_dir", "echo", "whoami"] });
  });

  it("a tool blocking its thread for 4 s delays no other job's stream (largest gap between deltas < 1 s)", async () => {
    await defineAgent("streamer", {});
    await defineAgent("blocker", { tools: ["spin"] });
    const words = Array.from({ length: 50 }, (_, i) => `s${i}`).join(" ");
    const streaming = await submit("streamer", script({ reply: words, tokens_per_s: 10 }));
    const streamEvents = eventsOf(streaming);
    await waitFor("the stream to run", async () => ((await job(streaming)).state === "running" ? true : null), {
      timeoutMs: 30_000,
      intervalMs: 50,
    });
    const blocking = await submit(
      "blocker",
      script({ tool_calls: [{ name: "spin", args: { ms: 4000 } }], reply: "spun" }),
    );
    const blockEvents = await eventsOf(blocking);
    const events = await streamEvents;
    const deltas = events.filter((e) => e.event === "model.delta").map((e) => e.at);
    const gaps = deltas.slice(1).map((at, i) => at - (deltas[i] as number));
    const toolCall = blockEvents.find((e) => e.event === "tool.call");
    const toolResult = blockEvents.find((e) => e.event === "tool.result");
    expect(toolResult?.payload).toMatchObject({ ok: true });
    expect((toolResult?.payload.output as { spun_ms: number } | undefined)?.spun_ms).toBeGreaterThanOrEqual(4000);
    // The stream was live the whole time the tool blocked its thread.
    const blockedFrom = toolCall?.at as number;
    const blockedTo = toolResult?.at as number;
    expect(deltas.filter((at) => at > blockedFrom && at < blockedTo).length).toBeGreaterThan(20);
    expect(Math.max(...gaps)).toBeLessThan(1000);
    expect((await finished(streaming)).state).toBe("completed");
    expect((await finished(blocking)).state).toBe("completed");
  }, 120_000);

  it("ctx carries the job's identity: job, execution and epoch from its row, tenant, <job>:<call> key", async () => {
    await defineAgent("asker", { tools: ["whoami"] });
    const id = await submit("asker", script({ tool_calls: [{ name: "whoami", args: {} }], reply: "ok" }));
    const events = await eventsOf(id);
    expect((await finished(id)).state).toBe("completed");
    const call = events.find((e) => e.event === "tool.call")?.payload as { id: string };
    const result = events.find((e) => e.event === "tool.result")?.payload as {
      ok: boolean;
      output: Record<string, unknown>;
    };
    const row = await t.pool.query<{ execution_id: string; epoch: number; tenant_id: string }>(
      "SELECT execution_id, epoch, tenant_id FROM jobs WHERE id = $1",
      [id],
    );
    expect(result).toMatchObject({ ok: true });
    expect(result.output).toEqual({
      job_id: id,
      execution_id: row.rows[0]?.execution_id,
      epoch: row.rows[0]?.epoch,
      tenant_id: t.stack.tenantId,
      idempotency_key: `${id}:${call.id}`,
      aborted: false,
      log: "function",
    });
  });

  it("a throw and a timeout are tool errors the model reads; the job completes and the host stays ready", async () => {
    await defineAgent("clumsy", { tools: ["boom", "stuck"] });
    const id = await submit(
      "clumsy",
      script({
        tool_calls: [
          { name: "boom", args: {} },
          { name: "stuck", args: {} },
        ],
        reply: "handled",
      }),
    );
    const events = await eventsOf(id);
    const results = events.filter((e) => e.event === "tool.result").map((e) => e.payload);
    expect(results).toEqual([
      expect.objectContaining({
        ok: false,
        output: { code: "tool_error", message: "RangeError: the order store is down" },
      }),
      expect.objectContaining({
        ok: false,
        output: { code: "tool_timeout", message: 'tool "stuck" ran past its 300 ms; its thread was ended' },
      }),
    ]);
    expect(await finished(id)).toMatchObject({ state: "completed", output: "handled" });
    const ready = await fetch(new URL("/readyz", t.stack.hosts[0]!.metricsUrl));
    expect(ready.status).toBe(200);
  });

  it("a result past 64 KiB reaches the event and the model cut, marked truncated", async () => {
    await defineAgent("bulky", { tools: ["big"] });
    const id = await submit("bulky", script({ tool_calls: [{ name: "big", args: {} }] }));
    const events = await eventsOf(id);
    const result = events.find((e) => e.event === "tool.result")?.payload as {
      ok: boolean;
      output: { text: string; truncated: boolean };
    };
    expect(result.ok).toBe(true);
    expect(result.output.truncated).toBe(true);
    expect(result.output.text.length).toBe(64 * 1024);
    const done = await finished(id);
    expect(done.state).toBe("completed");
    // The mock model echoes the tool message it read: the cut JSON and the marker.
    expect(done.output).toContain("[truncated]");
  });

  it("a job cancelled during a call deaf to its cancel ends cancelled at once, and the next call gets a thread", async () => {
    await defineAgent("deaf", { tools: ["ignore_cancel"] });
    const id = await submit("deaf", script({ tool_calls: [{ name: "ignore_cancel", args: {} }], reply: "never" }));
    const events: SseEvent[] = [];
    for await (const ev of readSse(`${t.stack.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: { authorization: `Bearer ${t.stack.apiKey}` },
      signal: AbortSignal.timeout(30_000),
    })) {
      events.push(ev);
      if (ev.event === "tool.call") break;
    }
    await new Promise((r) => setTimeout(r, 300));
    const t0 = performance.now();
    const c = await api().call("POST", `/v1/jobs/${id}/cancel`);
    expect(c.status).toBeLessThan(300);
    const ended = await finished(id, 15_000);
    expect(ended.state).toBe("cancelled");
    // The tool would have run 20 s; the job ended long before.
    expect(performance.now() - t0).toBeLessThan(5000);
    // The slot came back: another call runs.
    await defineAgent("echoer", { tools: ["echo"] });
    const next = await submit(
      "echoer",
      script({ tool_calls: [{ name: "echo", args: { text: "again" } }], reply: "ok" }),
    );
    expect((await finished(next)).state).toBe("completed");
  });

  it("a tool only another host offers: the agent is accepted, the call here answers tool_unavailable", async () => {
    const db = drizzle(t.pool, { schema });
    await publishCodeTools(db, "another-host", [
      {
        name: "remote_only",
        description: "Only elsewhere",
        input_schema: { type: "object" },
        idempotent: false,
        requires_approval: false,
        timeout_ms: 1000,
      },
    ]);
    try {
      await defineAgent("elsewhere", { tools: ["remote_only"] });
      const id = await submit("elsewhere", script({ tool_calls: [{ name: "remote_only", args: {} }], reply: "noted" }));
      const events = await eventsOf(id);
      expect(events.find((e) => e.event === "tool.result")?.payload).toMatchObject({
        ok: false,
        output: { code: "tool_unavailable", message: 'this host has no tool "remote_only"' },
      });
      expect((await finished(id)).state).toBe("completed");

      // That host died without a graceful stop: once its rows are past CODE_TOOLS_STALE_S
      // without a refresh, the tool is neither listed nor accepted.
      await t.pool.query(
        "UPDATE code_tools SET published_at = now() - make_interval(secs => $1 + 1) WHERE host_id = 'another-host'",
        [CODE_TOOLS_STALE_S],
      );
      const listed = await api().call<{ tools: ToolView[] }>("GET", "/v1/tools");
      expect(listed.body.tools.map((x) => x.name)).not.toContain("remote_only");
      expect(listed.body.tools.map((x) => x.name)).toContain("echo");
      const refused = await api().call<{ error: { message: string } }>("POST", "/v1/agents/elsewhere/versions", {
        model: t.stack.modelName,
        tools: ["remote_only"],
      });
      expect(refused.status).toBe(400);
      expect(refused.body.error.message).toMatch(/^tools\.0: unknown tool "remote_only"/);
      // A live host's refresh (every CODE_TOOLS_REFRESH_MS) makes its rows fresh again.
      await refreshCodeTools(db, "another-host");
      const again = await api().call<{ tools: ToolView[] }>("GET", "/v1/tools");
      expect(again.body.tools.map((x) => x.name)).toContain("remote_only");
      // A host going to sleep for an hour dates its rows to the sleep's end (it refreshes none
      // while asleep): still listed when a busy host's rows would be stale long since.
      await refreshCodeTools(db, "another-host", new Date(Date.now() + 3_600_000));
      await t.pool.query(
        "UPDATE code_tools SET published_at = published_at - make_interval(secs => $1 + 1) WHERE host_id = 'another-host'",
        [CODE_TOOLS_STALE_S],
      );
      const asleep = await api().call<{ tools: ToolView[] }>("GET", "/v1/tools");
      expect(asleep.body.tools.map((x) => x.name)).toContain("remote_only");
    } finally {
      await unpublishCodeTools(db, "another-host");
    }
  });
});

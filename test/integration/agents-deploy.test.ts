/**
 * Agents as code and the README's orders example, end to end: a stack whose host loads
 * examples/orders/order-tools.ts (HOST_TOOLS, importing `edge-agent-runtime/tools` as a team
 * would, so the package is built first); `npm run cli -- agents deploy examples/orders` as a
 * process (--dry-run writes nothing; then version 1; again: unchanged), a changed definition gets
 * exactly one new version with the change printed, and a job of the deployed agent calls
 * lookup_order on a tool thread and completes with the order's status.
 */
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { defineAgent } from "../../src/code-tools/define-agent";
import type { JobView } from "../../src/contracts/job";
import { buildPackages } from "../../tools/build/packages";
import { deployAgents, loadAgents } from "../../tools/cli/agents-deploy";
import { readSse } from "../../tools/lib/sse";
import { agentJobs, apiClient } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");
const ROOT = resolve(import.meta.dirname, "../..");

describe.skipIf(!canRun)("agents deploy and the orders example", () => {
  beforeAll(async () => {
    await buildPackages();
  }, 120_000);
  const t = useStack({
    hosts: 1,
    mockModel: { ttftMs: 5, tokensPerS: 2000 },
    hostEnv: { HOST_TOOLS: "examples/orders/order-tools.ts" },
  });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const { submit, finished, waiting } = agentJobs<JobView & { waiting_for: { call_id: string } | null }>(
    api,
    () => t.stack.modelName,
  );

  const cli = (args: string[]) =>
    new Promise<{ code: number | null; out: string }>((ok) => {
      const child = spawn(process.execPath, ["--import", "tsx", "tools/cli/operator.ts", ...args], {
        cwd: ROOT,
        env: { ...process.env, EAR_URL: t.stack.gatewayUrl, EAR_API_KEY: t.stack.apiKey },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d));
      child.stderr.on("data", (d: Buffer) => (out += d));
      child.once("exit", (code) => ok({ code, out }));
    });
  const versions = async (name: string) =>
    (
      await api().call<{ versions?: Array<{ version: number }> }>("GET", `/v1/agents/${name}/versions`)
    ).body.versions?.map((v) => v.version) ?? [];

  it("deploys the example: --dry-run writes nothing, then version 1, then nothing again", async () => {
    const dry = await cli(["agents", "deploy", "examples/orders", "--dry-run"]);
    expect(dry.code, dry.out).toBe(0);
    expect(dry.out).toContain("orders: would create (version 1)");
    expect(dry.out).toContain('  tools: ["lookup_order","request_refund"]');
    expect((await api().call("GET", "/v1/agents/orders")).status).toBe(404);

    const first = await cli(["agents", "deploy", "examples/orders"]);
    expect(first.code, first.out).toBe(0);
    expect(first.out).toContain("orders: created (version 1)");
    const again = await cli(["agents", "deploy", "examples/orders/support-agent.ts"]);
    expect(again.code, again.out).toBe(0);
    expect(again.out.trim()).toBe("orders: unchanged (version 1)");
    expect(await versions("orders")).toEqual([1]);
  }, 120_000);

  it("a changed definition gets one new version, printing what changed; unchanged ones none", async () => {
    const agent = (await loadAgents(resolve(ROOT, "examples/orders")))[0]!.agent;
    const changed = defineAgent({ ...agent, instructions: "Be brief.", limits: { max_turns: 6 }, priority: 3 });
    const lines: string[] = [];
    const r = await deployAgents({ baseUrl: t.stack.gatewayUrl, apiKey: t.stack.apiKey }, [{ agent: changed }], {
      dryRun: false,
      out: (l) => lines.push(l),
    });
    expect(r).toEqual([{ name: "orders", outcome: "new_version", version: 2 }]);
    expect(lines).toEqual([
      "orders: version 2 created",
      '  instructions: "You help customers with their orders. Look an order up before you answer about it." → "Be brief."',
      '  limits: {"max_cost_usd":null,"max_output_tokens":null,"max_tokens":null,"max_turns":4,"on_budget":"fail","timeout_s":null} → {"max_cost_usd":null,"max_output_tokens":null,"max_tokens":null,"max_turns":6,"on_budget":"fail","timeout_s":null}',
      "  priority: 0 → 3",
    ]);
    const twice = await deployAgents({ baseUrl: t.stack.gatewayUrl, apiKey: t.stack.apiKey }, [{ agent: changed }], {
      dryRun: false,
      out: () => {},
    });
    expect(twice).toEqual([{ name: "orders", outcome: "unchanged", version: 2 }]);
    expect(await versions("orders")).toEqual([2, 1]);
  });

  it("a job of the deployed agent looks the order up on a tool thread and completes", async () => {
    const id = await submit("orders", {
      input: {
        messages: [
          {
            role: "user",
            content: `!mock ${JSON.stringify({ tool_calls: [{ name: "lookup_order", args: { id: "A-1001" } }] })}`,
          },
        ],
      },
    });
    const results: Array<Record<string, unknown>> = [];
    for await (const ev of readSse(`${t.stack.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: { authorization: `Bearer ${t.stack.apiKey}` },
      signal: AbortSignal.timeout(30_000),
    })) {
      if (ev.event === "tool.result") results.push(JSON.parse(ev.data).payload);
      if (ev.event === "run.completed" || ev.event === "run.failed") break;
    }
    expect(results).toEqual([
      expect.objectContaining({ ok: true, output: expect.objectContaining({ id: "A-1001", status: "shipped" }) }),
    ]);
    const done = await finished(id);
    expect(done.state).toBe("completed");
    expect(done.output).toContain("shipped");
  });

  it("request_refund asks for approval itself (defineTool's requires_approval): it runs once approved, keyed by the call", async () => {
    const id = await submit("orders", {
      input: {
        messages: [
          {
            role: "user",
            content: `!mock ${JSON.stringify({ tool_calls: [{ name: "request_refund", args: { id: "A-1002", reason: "arrived broken" } }] })}`,
          },
        ],
      },
    });
    const w = await waiting(id);
    const callId = w.waiting_for?.call_id as string;
    const decided = await api().call("POST", `/v1/jobs/${id}/approvals/${encodeURIComponent(callId)}`, {
      decision: "approve",
    });
    expect(decided.status).toBeLessThan(300);
    const done = await finished(id);
    expect(done.state).toBe("completed");
    expect(done.output).toContain(`"reference":"${id}:${callId}"`);
  });
});

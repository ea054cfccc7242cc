/**
 * The package's exports as a consumer meets them (package.json `exports`, tools/build/packages.ts): built,
 * then imported by name with plain Node (a self-reference from the package root), and
 * typechecked by name from test/package-consumer/consumer.ts against the declarations the build wrote.
 */
import { spawn } from "node:child_process";
import { rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { buildPackages } from "../../tools/build/packages";

const ROOT = resolve(import.meta.dirname, "../..");

function run(cmd: string, args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((ok, fail) => {
    const child = spawn(cmd, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d));
    child.stderr.on("data", (d: Buffer) => (out += d));
    child.once("error", fail);
    child.once("exit", (code) => ok({ code, out }));
  });
}

describe("package exports", () => {
  beforeAll(async () => {
    await buildPackages();
  }, 120_000);

  it("Node imports edge-agent-runtime/ai-sdk and edge-agent-runtime/react by name", async () => {
    const script = `
      const ai = await import("edge-agent-runtime/ai-sdk");
      const react = await import("edge-agent-runtime/react");
      const t = new ai.EarChatTransport({ baseUrl: "http://127.0.0.1:1", credential: "a.b.c" });
      console.log(JSON.stringify({
        replay: t.resumeStreamIsReplay,
        send: typeof t.sendMessages, reconnect: typeof t.reconnectToStream,
        hooks: [typeof react.useJob, typeof react.useJobTree, typeof react.EarProvider, typeof react.EarClient],
      }));`;
    const { code, out } = await run(process.execPath, ["--input-type=module", "-e", script]);
    expect(code, out).toBe(0);
    expect(JSON.parse(out.trim())).toEqual({
      replay: true,
      send: "function",
      reconnect: "function",
      hooks: ["function", "function", "function", "function"],
    });
  });

  it("Node imports defineTool from edge-agent-runtime/tools: a zod or JSON Schema tool is marked, a bad one is refused naming it", async () => {
    const script = `
      const { defineTool, isCodeTool } = await import("edge-agent-runtime/tools");
      const { z } = await import("zod");
      const zodTool = defineTool({ name: "lookup_order", description: "d", input: z.object({ id: z.string() }), run: async (a) => a.id });
      const jsonTool = defineTool({ name: "ping", description: "d", input: { type: "object" }, idempotent: true, timeout_ms: 500, run: () => "pong" });
      const refused = [];
      for (const bad of [
        { name: "shell", description: "d", input: { type: "object" }, run() {} },
        { name: "a__b", description: "d", input: { type: "object" }, run() {} },
        { name: "nice", description: "d", input: { type: "string" }, run() {} },
        { name: "slow", description: "d", input: { type: "object" }, timeout_ms: 10, run() {} },
      ]) {
        try { defineTool(bad); refused.push("accepted " + bad.name); } catch (e) { refused.push(e.message); }
      }
      console.log(JSON.stringify({
        marked: [isCodeTool(zodTool), isCodeTool(jsonTool), isCodeTool({ name: "x" })],
        defaults: [zodTool.idempotent, zodTool.requires_approval, zodTool.timeout_ms, jsonTool.idempotent, jsonTool.timeout_ms],
        ran: await zodTool.run({ id: "o-1" }),
        refused,
      }));`;
    const { code, out } = await run(process.execPath, ["--input-type=module", "-e", script]);
    expect(code, out).toBe(0);
    const got = JSON.parse(out.trim());
    expect(got.marked).toEqual([true, true, false]);
    expect(got.defaults).toEqual([false, false, 30_000, true, 500]);
    expect(got.ran).toBe("o-1");
    expect(got.refused).toEqual([
      `tool "shell": name is a built-in tool's name`,
      `tool "a__b": name must not contain "__" (MCP tools' separator)`,
      `tool "nice": input must be a zod schema or a JSON Schema object with "type": "object"`,
      `tool "slow": timeout_ms must be an integer from 100 to 600000`,
    ]);
  });

  it("Node imports defineAgent from edge-agent-runtime/agents: checked at definition, defaults applied by agentBody", async () => {
    const script = `
      const { defineAgent, isDefinedAgent, agentBody } = await import("edge-agent-runtime/agents");
      const a = defineAgent({ name: "orders", model: "m", tools: ["lookup_order"] });
      let refused = "";
      try { defineAgent({ name: "Bad Name", model: "m" }); } catch (e) { refused = e.message; }
      const body = agentBody(a);
      console.log(JSON.stringify({ marked: isDefinedAgent(a), turns: body.limits.max_turns, tools: body.tools, refused }));`;
    const { code, out } = await run(process.execPath, ["--input-type=module", "-e", script]);
    expect(code, out).toBe(0);
    const got = JSON.parse(out.trim());
    expect(got).toMatchObject({ marked: true, turns: 8, tools: ["lookup_order"] });
    expect(got.refused).toMatch(/^agent "Bad Name": .*name/);
  });

  it("their declarations typecheck a consumer by name (bundler resolution, as Vite apps use)", async () => {
    const config = join(ROOT, "test", "package-consumer", ".tsconfig.json");
    await writeFile(
      config,
      JSON.stringify({
        extends: "../../tsconfig.base.json",
        compilerOptions: { lib: ["ES2023", "DOM"], types: [] },
        files: ["consumer.ts"],
      }),
    );
    try {
      const { code, out } = await run(join(ROOT, "node_modules", ".bin", "tsc"), ["-p", config]);
      expect(out).toBe("");
      expect(code).toBe(0);
    } finally {
      await rm(config, { force: true });
    }
  }, 60_000);
});

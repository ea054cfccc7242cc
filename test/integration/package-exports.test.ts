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

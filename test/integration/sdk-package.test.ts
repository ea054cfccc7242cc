/**
 * The SDK as a team meets it (docs/sdk.md): `npm run pack`'s tarball, checked with publint and
 * @arethetypeswrong/cli (ESM only: the node10 and CommonJS-require rows are not claimed), then
 * installed into an empty project, where a Node backend imports `edge-agent-runtime/client`
 * with neither React nor the runtime's own dependencies installed, and TypeScript checks a
 * consumer under `bundler` and `nodenext` resolution with the declarations' own checks on
 * (skipLibCheck false).
 *
 * publint and attw are run as their CLIs, found in node_modules/.bin (devDependencies) or on PATH.
 */
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packSdk } from "../helpers/sdk-pack";

const exec = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "../..");
const env = { ...process.env, PATH: `${join(ROOT, "node_modules", ".bin")}${delimiter}${process.env.PATH}` };

async function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await exec(cmd, args, { cwd, env, maxBuffer: 16 * 1024 * 1024 });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string; message: string };
    return { code: typeof e.code === "number" ? e.code : 1, out: `${e.stdout ?? ""}${e.stderr ?? e.message}` };
  }
}

describe("the SDK package (npm run pack)", () => {
  let dir: string;
  let tarball: string;
  let app: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "ear-sdk-package-"));
    tarball = await packSdk(dir);
    app = join(dir, "backend");
    await mkdir(app);
    await writeFile(
      join(app, "package.json"),
      JSON.stringify({ name: "backend", private: true, type: "module", dependencies: {} }),
    );
    const installed = await run(
      "npm",
      ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", tarball],
      app,
    );
    expect(installed.code, installed.out).toBe(0);
  }, 180_000);

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("publint finds nothing to fix in the tarball", async () => {
    const { code, out } = await run("publint", ["run", tarball, "--strict"], dir);
    expect(out).toContain("All good");
    expect(code, out).toBe(0);
  }, 60_000);

  it("@arethetypeswrong/cli resolves every entry's types under node16 (ESM) and bundler", async () => {
    const { code, out } = await run("attw", [tarball, "--profile", "esm-only", "--format", "json"], dir);
    expect(code, out).toBe(0);
    const report = JSON.parse(out) as { analysis: { entrypoints: Record<string, unknown> }; problems?: unknown[] };
    expect(Object.keys(report.analysis.entrypoints).sort()).toEqual(
      ["./agents", "./ai-sdk", "./client", "./package.json", "./react", "./tools"].sort(),
    );
  }, 120_000);

  it("an install brings only the SDK's own dependencies: no React, no AI SDK, no runtime", async () => {
    const lock = JSON.parse(await readFile(join(app, "package-lock.json"), "utf8")) as {
      packages: Record<string, unknown>;
    };
    const names = Object.keys(lock.packages)
      .filter((p) => p.startsWith("node_modules/"))
      .map((p) => p.slice("node_modules/".length))
      .sort();
    expect(names).toEqual(["edge-agent-runtime", "eventsource-parser", "zod"]);
    expect(await readdir(join(app, "node_modules", "edge-agent-runtime"))).toEqual(
      expect.arrayContaining(["client.js", "ai-sdk.js", "react.js", "tools.js", "agents.js", "types", "README.md"]),
    );
  });

  it("a Node backend imports edge-agent-runtime/client, /tools and /agents without React", async () => {
    const script = `
      const { EarClient, ApiClientError } = await import("edge-agent-runtime/client");
      const { defineTool } = await import("edge-agent-runtime/tools");
      const { defineAgent } = await import("edge-agent-runtime/agents");
      const api = new EarClient({ baseUrl: "http://127.0.0.1:9", credential: "ear_x" });
      let failed = "";
      try { await api.get("00000000-0000-4000-8000-000000000000"); } catch (e) { failed = e.name; }
      const tool = defineTool({ name: "ping", description: "d", input: { type: "object" }, run: () => "pong" });
      const agent = defineAgent({ name: "a", model: "m", tools: ["ping"] });
      console.log(JSON.stringify({ client: typeof api.submit, error: typeof ApiClientError, failed, tool: tool.name, agent: agent.name }));`;
    const { code, out } = await run(process.execPath, ["--input-type=module", "-e", script], app);
    expect(code, out).toBe(0);
    expect(JSON.parse(out.trim())).toEqual({
      client: "function",
      error: "function",
      failed: "TypeError",
      tool: "ping",
      agent: "a",
    });
  });

  it.each(["bundler", "nodenext"] as const)(
    "TypeScript checks a consumer under moduleResolution %s with skipLibCheck false",
    async (resolution) => {
      await writeFile(
        join(app, "consumer.ts"),
        `import { EarClient, ApiClientError, type StreamedEvent, type JobView } from "edge-agent-runtime/client";
import { defineTool } from "edge-agent-runtime/tools";
import { defineAgent } from "edge-agent-runtime/agents";
import { z } from "zod";
export const api = new EarClient({ baseUrl: "https://api.example.com", credential: () => "ear_x" });
export async function states(id: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of api.events(id)) out.push((e satisfies StreamedEvent).event.type);
  const { job } = await api.get(id);
  const state: JobView["state"] = job.state;
  // @ts-expect-error a state is a string, never a number
  const wrong: number = job.state;
  void wrong;
  return [...out, state];
}
export const isApiError = (e: unknown) => e instanceof ApiClientError && e.status === 404;
export const lookup = defineTool({
  name: "lookup_order",
  description: "Find an order",
  input: z.object({ id: z.string() }),
  run: async (args) => args.id.toUpperCase(),
});
export const agent = defineAgent({ name: "orders", model: "m", tools: ["lookup_order"] });
`,
      );
      const module = resolution === "bundler" ? "esnext" : "nodenext";
      await writeFile(
        join(app, `tsconfig.${resolution}.json`),
        JSON.stringify({
          compilerOptions: {
            target: "es2022",
            module,
            moduleResolution: resolution,
            lib: ["es2023", "dom"],
            strict: true,
            skipLibCheck: false,
            noEmit: true,
            types: [],
          },
          files: ["consumer.ts"],
        }),
      );
      const { code, out } = await run(
        join(ROOT, "node_modules", ".bin", "tsc"),
        ["-p", `tsconfig.${resolution}.json`],
        app,
      );
      expect(out).toBe("");
      expect(code).toBe(0);
    },
    60_000,
  );
});

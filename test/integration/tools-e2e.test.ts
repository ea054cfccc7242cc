/**
 * Tool calls in Docker sandboxes, end to end through the real stack: created lazily by the first
 * tool call, exactly one per run, removed with its network at every kind of end (completed,
 * cancelled, host SIGKILLed then restarted), never a fallback to the host.
 */
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Docker } from "../../sandbox-host/sandbox/docker";
import { readSse, type SseEvent } from "../../tools/lib/sse";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient } from "../helpers/api";
import { testPool } from "../helpers/db";
import { countHostObjects, removeHostObjects, requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";

const docker = await requireDocker();
const canRun = docker !== null && (await requireBinary("redis-server", "apt-get install redis-server"));

const mock = (script: object) => ({ role: "user", content: `!mock ${JSON.stringify(script)}` });

describe.skipIf(!canRun)("tool calls in sandboxes, end to end", () => {
  let stack: Stack;
  let api: ReturnType<typeof apiClient>;
  let pool: pg.Pool;
  const hostId = `test-tools-${randomUUID().slice(0, 8)}`;
  const d = docker as Docker;

  beforeAll(async () => {
    stack = await startStack({
      hosts: 1,
      hostEnv: { HOST_ID: hostId, HOST_HEARTBEAT_MS: "300", HOST_RUN_LOST_AFTER_MS: "1500", HOST_REAP_MS: "200" },
    });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
    pool = testPool(stack.databaseUrl, 2);
  }, 180_000);
  afterAll(async () => {
    await pool?.end();
    await stack?.stop();
    await removeHostObjects(d, hostId);
  }, 60_000);

  async function submit(body: object): Promise<string> {
    const r = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", body);
    expect(r.status).toBe(202);
    return r.body.job.id;
  }
  const events = (id: string) => api.events(id);
  /** The job row once its cleanup fence is clear (or as it is after 5 s). */
  async function fenceCleared(id: string): Promise<{ state: string; cleanup_pending: boolean } | undefined> {
    let row: { state: string; cleanup_pending: boolean } | undefined;
    for (const until = Date.now() + 5000; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
      row = (await pool.query("select state, cleanup_pending from jobs where id = $1", [id])).rows[0];
      if (row && !row.cleanup_pending) break;
    }
    return row;
  }
  /** A job whose tool call sleeps in its sandbox; resolves once the sandbox's container exists. */
  async function jobInASandboxedSleep(): Promise<string> {
    const id = await submit({
      input: { messages: [mock({ tool_calls: [{ name: "shell", args: { command: "sleep 60" } }] })] },
      tools: ["shell"],
    });
    // Its recoveries used up (the default allows 3), so the reaper ends it `lost`, not recovered (recovery.test.ts has those).
    await pool.query("UPDATE jobs SET recoveries = 3 WHERE id = $1", [id]);
    const deadline = Date.now() + 20_000;
    while ((await countHostObjects(d, hostId)).containers === 0) {
      if (Date.now() > deadline) throw new Error("sandbox never appeared");
      await new Promise((r) => setTimeout(r, 100));
    }
    return id;
  }
  const payload = (e: SseEvent) => (JSON.parse(e.data) as { payload: Record<string, unknown> }).payload;
  async function noSandboxLeft() {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const n = await countHostObjects(d, hostId);
      if (n.containers === 0 && n.networks === 0) return n;
      if (Date.now() > deadline) return n;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  it("a text-only run creates no sandbox", async () => {
    const id = await submit({ input: { messages: [{ role: "user", content: "just text" }] }, tools: ["shell"] });
    const evs = await events(id);
    expect(evs.at(-1)?.event).toBe("run.completed");
    expect(evs.map((e) => e.event)).not.toContain("sandbox.created");
    expect(await countHostObjects(d, hostId)).toEqual({ containers: 0, networks: 0 });
  });

  it("runs tool calls in one hardened sandbox and removes it (and its network) when the run completes", async () => {
    const id = await submit({
      input: {
        messages: [
          mock({
            tool_calls: [
              { name: "write_file", args: { path: "note.txt", content: "hello from the agent" } },
              { name: "shell", args: { command: "cat note.txt; echo; id -u" } },
            ],
            reply: "all done",
          }),
        ],
      },
      tools: ["shell", "write_file", "read_file"],
    });
    const evs = await events(id);
    const types = evs.map((e) => e.event);
    expect(types.filter((t) => t === "tool.call")).toHaveLength(2);
    expect(types.filter((t) => t === "tool.result")).toHaveLength(2);
    expect(types.filter((t) => t === "sandbox.created")).toHaveLength(1);
    expect(types.at(-1)).toBe("run.completed");
    const shell = evs.filter((e) => e.event === "tool.result").map(payload)[1] as {
      ok: boolean;
      output: { stdout: string; exit_code: number };
    };
    expect(shell.ok).toBe(true);
    expect(shell.output.exit_code).toBe(0);
    expect(shell.output.stdout).toContain("hello from the agent");
    expect(shell.output.stdout.trim().split("\n").at(-1)).toBe("65534"); // non-root inside
    expect(payload(evs.at(-1) as SseEvent).output).toBe("all done");
    expect(await noSandboxLeft()).toEqual({ containers: 0, networks: 0 });
    // The fence is cleared right after the sandbox is gone (after the terminal event).
    let row = await pool.query("select state, cleanup_pending from jobs where id = $1", [id]);
    for (let i = 0; i < 100 && row.rows[0].cleanup_pending; i++) {
      await new Promise((r) => setTimeout(r, 50));
      row = await pool.query("select state, cleanup_pending from jobs where id = $1", [id]);
    }
    expect(row.rows[0]).toEqual({ state: "completed", cleanup_pending: false });
  });

  /** The tool.call / tool.result pair of a refused call, and how the run ended. */
  async function refusedCall(id: string, name: string) {
    const evs = await events(id);
    expect(evs.filter((e) => e.event === "tool.call").map((e) => payload(e).name)).toEqual([name]);
    const results = evs.filter((e) => e.event === "tool.result").map(payload);
    expect(results).toEqual([
      { id: expect.any(String), ok: false, output: { code: "invalid_input", message: `unknown tool "${name}"` } },
    ]);
    // The model read the error and answered: the job went on to complete.
    expect(evs.at(-1)?.event).toBe("run.completed");
    expect(String(payload(evs.at(-1) as SseEvent).output)).toContain("unknown tool");
    expect(await countHostObjects(d, hostId)).toEqual({ containers: 0, networks: 0 });
  }

  it("a model calling a sandbox tool the job does not allow gets a tool error it reads; the job completes, nothing is created", async () => {
    const id = await submit({
      input: { messages: [mock({ tool_calls: [{ name: "shell", args: { command: "echo sneaky" } }] })] },
    });
    await refusedCall(id, "shell");
  });

  it("an agent with no tools whose model calls an unknown tool: the same tool error, and the job completes", async () => {
    const r = await api.call("POST", "/v1/agents", { name: "toolless", model: stack.modelName });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const id = await submit({
      agent: "toolless",
      input: { messages: [mock({ tool_calls: [{ name: "fetch_url", args: { url: "http://example.com" } }] })] },
    });
    await refusedCall(id, "fetch_url");
  });

  it("cancel kills a running command and removes the sandbox", async () => {
    const id = await submit({
      input: { messages: [mock({ tool_calls: [{ name: "shell", args: { command: "sleep 60" } }] })] },
      tools: ["shell"],
    });
    const it = readSse(`${stack.gatewayUrl}/v1/jobs/${id}/events`, {
      headers: { authorization: `Bearer ${stack.apiKey}` },
      signal: AbortSignal.timeout(30_000),
    });
    const seen: string[] = [];
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      seen.push(r.value.event);
      if (r.value.event === "sandbox.created" || r.value.event === "tool.call") break;
    }
    // Let the command start inside the sandbox.
    await new Promise((r) => setTimeout(r, 1500));
    const t0 = performance.now();
    const c = await api.call<{ status: string }>("POST", `/v1/jobs/${id}/cancel`);
    expect(c.body.status).toBe("requested");
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      seen.push(r.value.event);
    }
    expect(seen.at(-1)).toBe("run.cancelled");
    expect(performance.now() - t0).toBeLessThan(10_000); // not the 60 s of the command
    expect(await noSandboxLeft()).toEqual({ containers: 0, networks: 0 });
  });

  it("a host SIGKILLed mid tool call leaves a sandbox that the restarted host removes", async () => {
    const id = await jobInASandboxedSleep();
    const victim = stack.hosts[0];
    process.kill(-(victim?.process.pid as number), "SIGKILL");
    await new Promise((r) => setTimeout(r, 300));
    expect((await countHostObjects(d, hostId)).containers).toBe(1); // the orphan
    await stack.addHost({ HOST_ID: hostId, SANDBOX_JANITOR_MS: "300" });
    expect(await noSandboxLeft()).toEqual({ containers: 0, networks: 0 });
    // The run itself is lost (never re-run), and its stream ends, but only once its sandbox is
    // gone: a projected terminal event waits for the cleanup fence (docs/events.md).
    const evs = await events(id);
    expect(["run.lost", "run.failed"]).toContain(evs.at(-1)?.event);
    const row = (await pool.query("select cleanup_pending, finished_at from jobs where id = $1", [id])).rows[0];
    if (JSON.parse(evs.at(-1)?.data ?? "{}").payload?.source === "projector") {
      expect(row.cleanup_pending).toBe(false);
      const lagMs = Date.parse(JSON.parse(evs.at(-1)?.data ?? "{}").ts) - row.finished_at.getTime();
      console.log(`projected terminal event ${lagMs} ms after the row's finished_at`);
    }
    // The orphan went at the host's start, while the run still counted as running; the fence is
    // cleared by the janitor once the reaper has declared the run lost (no listing finds the
    // sandbox any more, so nothing else would clear it, and a fenced job is never purged).
    expect(await fenceCleared(id)).toEqual({ state: "lost", cleanup_pending: false });
  }, 60_000);

  it("a host SIGKILLed mid tool call: the job continues from its journal on the restarted host, the call is not repeated, the model is told its sandbox was reset", async () => {
    const id = await submit({
      input: {
        messages: [mock({ tool_calls: [{ name: "shell", args: { command: "sleep 60" } }] })],
      },
      tools: ["shell"],
    });
    const deadline = Date.now() + 20_000;
    while ((await countHostObjects(d, hostId)).containers === 0) {
      if (Date.now() > deadline) throw new Error("sandbox never appeared");
      await new Promise((r) => setTimeout(r, 100));
    }
    const victim = stack.hosts.at(-1);
    process.kill(-(victim?.process.pid as number), "SIGKILL");
    await stack.addHost({ HOST_ID: hostId, SANDBOX_JANITOR_MS: "300" });
    const evs = await events(id);
    const types = evs.map((e) => e.event);
    expect(types.at(-1)).toBe("run.completed");
    // The mock model answers the last user message: here the note the new execution added.
    expect(payload(evs.at(-1) as SseEvent).output).toContain("The sandbox was reset");
    // The shell call was made once (by the first execution); the second got outcome_unknown.
    expect(types.filter((t) => t === "tool.call")).toHaveLength(1);
    const recovered = evs.find((e) => e.event === "run.recovered");
    expect(recovered && payload(recovered)).toMatchObject({
      reason: "host_lost",
      sandbox_reset: true,
      discarded_turn: false,
    });
    expect((recovered && (payload(recovered).unknown_calls as string[]))?.length).toBe(1);
    expect(payload(evs.filter((e) => e.event === "tool.result").at(-1) as SseEvent)).toMatchObject({
      ok: false,
      output: { code: "outcome_unknown" },
    });
    // The dead execution's sandbox is gone and its fence cleared, although the row names the new execution.
    expect(await noSandboxLeft()).toEqual({ containers: 0, networks: 0 });
    expect(await fenceCleared(id)).toEqual({ state: "completed", cleanup_pending: false });
    const { rows } = await pool.query("select recoveries from jobs where id = $1", [id]);
    expect(rows[0]?.recoveries).toBe(1);
  }, 60_000);

  it("a run that fails after a tool call removes its sandbox and clears the cleanup fence", async () => {
    const id = await submit({
      input: {
        messages: [
          mock({
            // The tool call streams as 3 pieces (under the cut); the answer after it is cut at 6.
            tool_calls: [{ name: "shell", args: { command: "echo made-a-sandbox" } }],
            reply: "one two three four five six seven eight nine ten eleven twelve",
            drop_after_tokens: 6,
          }),
        ],
      },
      tools: ["shell"],
    });
    const evs = await events(id);
    expect(evs.map((e) => e.event)).toContain("tool.result");
    expect(evs.at(-1)?.event).toBe("run.failed");
    expect(await noSandboxLeft()).toEqual({ containers: 0, networks: 0 });
    // The fence is cleared right after the removal, so poll for it like for the objects.
    expect(await fenceCleared(id)).toEqual({ state: "failed", cleanup_pending: false });
  });

  it("a sandbox left by a host that never came back is removed by another host's janitor once its run is over", async () => {
    const id = await jobInASandboxedSleep();
    // The host holding the sandbox dies for good; a host with another id is (or comes) alive.
    const victim = stack.hosts.at(-1);
    process.kill(-(victim?.process.pid as number), "SIGKILL");
    const otherId = `${hostId}-other`;
    try {
      await stack.addHost({ HOST_ID: otherId, SANDBOX_JANITOR_MS: "300" });
      // Nothing of the dead host's is removed while its run is still `running` in Postgres…
      expect((await countHostObjects(d, hostId)).containers).toBe(1);
      // …and everything once the reaper has declared it lost; the janitor clears the job's
      // cleanup fence right after the removal.
      expect(await noSandboxLeft()).toEqual({ containers: 0, networks: 0 });
      expect(await fenceCleared(id)).toEqual({ state: "lost", cleanup_pending: false });
      const metrics = await (await fetch((stack.hosts.at(-1) as { metricsUrl: string }).metricsUrl)).text();
      expect(metrics).toMatch(/sandbox_delete_seconds_count\{[^}]*outcome="ok"[^}]*\} [1-9]/);
    } finally {
      await removeHostObjects(d, otherId);
    }
  }, 60_000);
});

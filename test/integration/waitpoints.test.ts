/**
 * Waitpoints end to end on the real stack (gateway in workerd, Postgres, Redis, two host
 * processes, Docker sandboxes, the mock model): a gated tool call suspends the run (the job
 * `waiting`, its execution `suspended`, no owner), a decision re-queues it and whichever host
 * claims it resumes from the checkpoint; approve runs the tool exactly once, deny gives the model
 * the note, a deadline ends the wait as configured, ask_user waits for input, cancel works while
 * waiting, decisions are idempotent and tenant-scoped, SIGKILL while waiting loses nothing and
 * SIGKILL while resuming is the usual fenced `lost`, and 50 waiting jobs hold no slot and no lease.
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { quotaKeys, redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { readSse, type SseEvent } from "../../tools/lib/sse";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import { requireDocker } from "../helpers/docker";
import { sampleValue } from "../helpers/metrics";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun =
  (await requireBinary("redis-server", "apt-get install redis-server")) && (await requireDocker()) !== null;

const script = (s: unknown) => ({ input: { messages: [{ role: "user", content: `!mock ${JSON.stringify(s)}` }] } });
const shellCall = (command: string) => script({ tool_calls: [{ name: "shell", args: { command } }] });

describe.skipIf(!canRun)("waitpoints: approval gates, ask_user, durable suspend and resume", () => {
  const t = useStack({
    hosts: 2,
    mockModel: { ttftMs: 5, tokensPerS: 2000 },
    // Not FAST_LOSS_HOST_ENV: its 300 ms heartbeat also makes every quota lease 900 ms (3 ×
    // HOST_HEARTBEAT_MS), and on a loaded CI machine one acquire through the REST bridge took
    // 1.1-1.3 s when 16 runs asked at once, so leases arrived already past their local deadline
    // and runs failed quota_lease_lost instead of reaching their waitpoint. The default heartbeat
    // (2 s: 6 s leases, a silent run lost after 8 s) is what the SIGKILL test can afford.
    // The janitor at 1 s: a lost run's stream ends only once its sandbox is removed (the
    // projector waits for the cleanup fence), and the default 30 s outlasts a stream read.
    hostEnv: { HOST_REAP_MS: "200", HOST_CLAIM_TIMEOUT_MS: "3000", SANDBOX_JANITOR_MS: "1000" },
  });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);

  const jobs = agentJobs<JobView>(api, () => t.stack.modelName);
  const { defineAgent, submit, job, waiting } = jobs;
  const finished = (id: string, timeoutMs = 40_000) => jobs.finished(id, timeoutMs);
  const events = (id: string) => api().events(id);
  /**
   * Where a set of jobs is, for a failure message: how many per state, owner and error code, the
   * ready index's size, and each host's view (run slots, idleness, sandbox creations queued,
   * claims, quota leases lost). A count of "waiting" alone said nothing when such a wait failed.
   */
  const whereJobsAre = async (ids: string[]) => {
    const jobs = (
      await t.pool.query(
        `select state, owner, error->>'code' as error, count(*)::int as n from jobs where id = any($1)
         group by 1, 2, 3 order by 1, 2, 3`,
        [ids],
      )
    ).rows;
    const names = [
      "runs_active",
      "host_fleet_idle",
      "sandbox_create_queued",
      "claims_total",
      "quota_leases_lost_total",
    ];
    const hosts = await Promise.all(
      t.stack.hosts.map(async (h) => {
        const text = await fetch(h.metricsUrl)
          .then((r) => r.text())
          .catch((e: unknown) => String(e));
        return text.split("\n").filter((l) => names.some((n) => l.startsWith(`${n}{`) || l.startsWith(`${n} `)));
      }),
    );
    const readyIndex = await createRedisClient(t.stack.upstash)
      .zcard(redisKeys().readyIndex())
      .catch((e: unknown) => String(e));
    return JSON.stringify({ jobs, ready_index: readyIndex, hosts }, null, 1);
  };
  const executions = async (id: string) =>
    (
      await t.pool.query<{ id: string; outcome: string | null; epoch: number; host: string }>(
        "select id, outcome, epoch, host from executions where job_id = $1 order by epoch",
        [id],
      )
    ).rows;
  const decide = (id: string, callId: string, body: unknown) =>
    api().call<Record<string, unknown>>("POST", `/v1/jobs/${id}/approvals/${encodeURIComponent(callId)}`, body);

  it("approve: the run suspends holding nothing, resumes from the checkpoint on a new epoch, and the tool runs exactly once", async () => {
    await defineAgent("gated", { tools: [{ name: "shell", requires_approval: true }, "read_file"] });
    const id = await submit("gated", shellCall("echo ran-$((40+2)) >> /workspace/count; cat /workspace/count"));
    const w = await waiting(id);
    expect(w.waiting_for).toMatchObject({
      kind: "approval",
      tool: "shell",
      arguments: { command: expect.stringContaining("ran-") },
      on_deadline: "deny",
    });
    expect(w.claimed).toBe(false);
    expect(w.execution_id).toBeNull();
    const row = (await t.pool.query("select owner, token, execution_id, checkpoint from jobs where id = $1", [id]))
      .rows[0];
    expect(row).toMatchObject({ owner: null, token: null, execution_id: null });
    // A view of the journal: the call that waits and its turn, no conversation.
    expect(row.checkpoint).toEqual({ v: 2, callId: w.waiting_for?.call_id, turn: 1 });
    expect((await executions(id)).map((e) => e.outcome)).toEqual(["suspended"]);
    // Listed as waiting under the state filter.
    const listed = await api().call<{ jobs: JobView[] }>("GET", "/v1/jobs?state=waiting&limit=100");
    expect(listed.body.jobs.map((j) => j.id)).toContain(id);

    const callId = w.waiting_for?.call_id as string;
    const first = await decide(id, callId, { decision: "approve", note: "looks safe" });
    expect(first.status).toBe(202);
    expect(first.body).toMatchObject({ call_id: callId, decision: "approve", note: "looks safe", decided_by: "api" });
    const again = await decide(id, callId, { decision: "approve", note: "looks safe" });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    const other = await decide(id, callId, { decision: "deny" });
    expect(other.status).toBe(409);
    expect((other.body as { error: { code: string } }).error.code).toBe("conflict");

    const done = await finished(id);
    expect(done.state, JSON.stringify(done)).toBe("completed");
    // The command appended once: the file holds one line.
    expect(done.output).toContain("ran-42");
    expect(done.output?.match(/ran-42/g)?.length).toBe(1);
    const execs = await executions(id);
    expect(execs.map((e) => e.outcome)).toEqual(["suspended", "completed"]);
    expect(execs[1]?.epoch).toBeGreaterThan(execs[0]?.epoch as number);

    const evs = await events(id);
    const types = evs.map((e) => e.event);
    expect(types.filter((x) => x === "tool.approval_requested")).toHaveLength(1);
    expect(types.filter((x) => x === "tool.call")).toHaveLength(1);
    expect(types.filter((x) => x === "tool.result")).toHaveLength(1);
    expect(types.indexOf("run.suspended")).toBeGreaterThan(types.indexOf("tool.approval_requested"));
    // run.resumed is the first event of the second execution, and both executions form one stream.
    const second = evs.filter((e) => JSON.parse(e.data).execution_id === execs[1]?.id);
    expect(second[0]?.event).toBe("run.resumed");
    expect(JSON.parse(second[0]?.data ?? "{}").payload).toMatchObject({
      call_id: callId,
      decision: "approve",
      by: "api",
    });
    expect(evs.map((e) => Number(e.id))).toEqual(evs.map((_, i) => i + 1));
    expect(types.at(-1)).toBe("run.completed");
  }, 90_000);

  it("the checkpoint is a view of the journal: its size does not grow with the run, and the resume rebuilds the conversation from job_journal", async () => {
    await defineAgent("gated-long", { tools: [{ name: "shell", requires_approval: true }, "write_file"] });
    // One turn of k completed calls, then the gated one: the resumed model request must carry all
    // k results (the mock echoes every tool result after the last assistant message).
    const longRun = async (k: number) => {
      const marker = randomUUID();
      const writes = Array.from({ length: k }, (_, i) => ({
        name: "write_file",
        args: { path: `/workspace/${marker}-${i}.txt`, content: "x".repeat(2000) },
      }));
      const gated = { name: "shell", args: { command: `echo gated-${marker}` } };
      const id = await submit("gated-long", script({ tool_calls: [...writes, gated] }));
      return { id, marker, k, w: await waiting(id) };
    };
    const [short, long] = await Promise.all([longRun(2), longRun(24)]);
    const size = new Map<string, number>();
    for (const r of [short, long]) {
      const row = (
        await t.pool.query(
          `select checkpoint, pg_column_size(checkpoint) as size,
             (select count(*)::int from job_journal j where j.job_id = jobs.id and j.kind = 'result') as results
           from jobs where id = $1`,
          [r.id],
        )
      ).rows[0];
      expect(row.checkpoint).toEqual({ v: 2, callId: r.w.waiting_for?.call_id, turn: 1 });
      expect(row.results).toBe(r.k);
      size.set(r.id, row.size);
    }
    // No transcript copy: 24 steps of 2 KB each leave the checkpoint as small as 2 do.
    expect(size.get(long.id)).toBeLessThan(120);
    // (The mock's call ids may differ by a character.)
    expect(Math.abs((size.get(long.id) ?? 0) - (size.get(short.id) ?? 0))).toBeLessThanOrEqual(2);

    for (const r of [short, long]) {
      expect((await decide(r.id, r.w.waiting_for?.call_id as string, { decision: "approve" })).status).toBe(202);
    }
    for (const r of [short, long]) {
      const done = await finished(r.id);
      expect(done.state, JSON.stringify(done)).toBe("completed");
      for (let i = 0; i < r.k; i++) expect(done.output).toContain(`${r.marker}-${i}.txt`);
      expect(done.output).toContain(`gated-${r.marker}`);
      // The resumed request: the prompt, the assistant's calls, and the k + 1 tool results.
      const asked = (await t.stack.mockModel?.requests(r.marker)) ?? [];
      expect(asked.map((q) => q.messages)).toEqual([1, r.k + 3]);
    }
  }, 120_000);

  it("deny: the model gets the note as the tool result, and the tool never runs", async () => {
    await defineAgent("gated-deny", { tools: [{ name: "shell", requires_approval: true }] });
    const id = await submit("gated-deny", shellCall("echo should-not-run"));
    const w = await waiting(id);
    const r = await decide(id, w.waiting_for?.call_id as string, { decision: "deny", note: "not on prod, please" });
    expect(r.status).toBe(202);
    const done = await finished(id);
    expect(done.state).toBe("completed");
    expect(done.output).toContain("not on prod, please");
    expect(done.output).not.toContain("should-not-run\\n");
    const types = (await events(id)).map((e) => e.event);
    expect(types).not.toContain("tool.call");
    expect(types.filter((x) => x === "tool.result")).toHaveLength(1);
  }, 60_000);

  it("deadline: on_deadline deny resumes with the deadline's denial; fail ends the job approval_expired", async () => {
    await defineAgent("gated-short-deny", {
      tools: [{ name: "shell", requires_approval: true }],
      approval: { deadline_s: 1 },
    });
    await defineAgent("gated-short-fail", {
      tools: [{ name: "shell", requires_approval: true }],
      approval: { deadline_s: 1, on_deadline: "fail" },
    });
    const denied = await submit("gated-short-deny", shellCall("echo x"));
    const failed = await submit("gated-short-fail", shellCall("echo y"));
    const [a, b] = await Promise.all([finished(denied), finished(failed)]);
    expect(a.state).toBe("completed");
    expect(a.output).toContain("nobody answered before the deadline");
    expect(b.state).toBe("failed");
    expect(b.error?.code).toBe("approval_expired");
    const types = (await events(failed)).map((e) => e.event);
    expect(types).toContain("run.suspended");
    expect(types.at(-1)).toBe("run.failed");
    // A decision after the deadline decided: the same one is answered, another is 409.
    const callId = (await t.pool.query("select call_id from job_waits where job_id = $1", [denied])).rows[0]?.call_id;
    expect((await decide(denied, callId, { decision: "deny" })).body).toMatchObject({ decided_by: "deadline" });
    expect((await decide(denied, callId, { decision: "approve" })).status).toBe(409);
  }, 60_000);

  it("ask_user: the run waits for POST …/input and the answer is the tool result", async () => {
    await defineAgent("asker", { ask_user: true });
    const id = await submit(
      "asker",
      script({ tool_calls: [{ name: "ask_user", args: { question: "which colour?" } }] }),
    );
    const w = await waiting(id);
    expect(w.waiting_for).toMatchObject({ kind: "input", tool: "ask_user", question: "which colour?" });
    // A question is not an approval.
    expect((await decide(id, w.waiting_for?.call_id as string, { decision: "approve" })).status).toBe(409);
    const input = await api().call("POST", `/v1/jobs/${id}/input`, { content: "ultramarine" });
    expect(input.status).toBe(202);
    const done = await finished(id);
    expect(done.state).toBe("completed");
    expect(done.output).toContain("ultramarine");
    const inputs = await api().call<{ inputs: Array<{ status: string }> }>("GET", `/v1/jobs/${id}/inputs`);
    expect(inputs.body.inputs.map((i) => i.status)).toEqual(["applied"]);
  }, 60_000);

  it("cancel while waiting ends the job at once; a decision afterwards is 409; unknown job, call and another tenant's job are 404", async () => {
    await defineAgent("gated-cancel", { tools: [{ name: "shell", requires_approval: true }] });
    const id = await submit("gated-cancel", shellCall("echo z"));
    const w = await waiting(id);
    const callId = w.waiting_for?.call_id as string;

    const db = drizzle(t.pool, { schema });
    await createTenant(db, "wait-other");
    const other = apiClient(t.stack.gatewayUrl, (await createApiKey(db, "wait-other")).key);
    expect((await other.call("POST", `/v1/jobs/${id}/approvals/${callId}`, { decision: "approve" })).status).toBe(404);
    expect((await decide(id, "no-such-call", { decision: "approve" })).status).toBe(404);
    expect((await decide(randomUUID(), callId, { decision: "approve" })).status).toBe(404);
    expect((await decide(id, callId, { decision: "maybe" })).status).toBe(400);

    const c = await api().call<{ status: string }>("POST", `/v1/jobs/${id}/cancel`);
    expect(c.body.status).toBe("cancelled");
    expect((await job(id)).state).toBe("cancelled");
    expect((await job(id)).waiting_for).toBeNull();
    expect((await decide(id, callId, { decision: "approve" })).status).toBe(409);
    expect((await events(id)).map((e) => e.event).at(-1)).toBe("run.cancelled");
  }, 60_000);

  it("50 waiting jobs hold no run slot and no quota lease", async () => {
    await defineAgent("gated-many", { tools: [{ name: "shell", requires_approval: true }] });
    const ids = await Promise.all(Array.from({ length: 50 }, () => submit("gated-many", shellCall("echo many"))));
    // Done when all 50 wait, or as soon as one has ended: a job that failed never comes to wait,
    // and counting only the waiting ones turned such a failure into a 60 s timeout saying nothing.
    const settled = await waitFor(
      "50 jobs waiting",
      async () => {
        const r = await t.pool.query<{ waiting: number; ended: number }>(
          `select count(*) filter (where state = 'waiting')::int as waiting,
             count(*) filter (where state not in ('queued', 'running', 'waiting'))::int as ended
           from jobs where id = any($1)`,
          [ids],
        );
        const row = r.rows[0];
        return row && (row.waiting === 50 || row.ended > 0) ? row : null;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    ).catch(async (err: unknown) => {
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n${await whereJobsAre(ids)}`);
    });
    if (settled.ended > 0)
      expect.fail(`${settled.ended} of the 50 jobs ended instead of waiting:\n${await whereJobsAre(ids)}`);
    const slots = await Promise.all(t.stack.hosts.map((h) => sampleValue(h.metricsUrl, "runs_active")));
    expect(slots).toEqual(t.stack.hosts.map(() => 0));
    const ready = await Promise.all(
      t.stack.hosts.map(
        async (h) =>
          (await (await fetch(h.metricsUrl.replace("/metrics", "/healthz"))).json()) as { runs_active: number },
      ),
    );
    expect(ready.map((r) => r.runs_active)).toEqual(t.stack.hosts.map(() => 0));
    const leases = await Promise.all(t.stack.hosts.map((h) => sampleValue(h.metricsUrl, "quota_leases_held")));
    expect(leases).toEqual(t.stack.hosts.map(() => 0));
    const redis = createRedisClient(t.stack.upstash);
    const keys = redisKeys();
    const held = await redis.zcard(keys.quotaLeases(quotaKeys.model(t.stack.modelName)));
    expect(held).toBe(0);
    const waits = await Promise.all(
      t.stack.hosts.map((h) => sampleValue(h.metricsUrl, "waits_started_total", { kind: "approval" })),
    );
    expect(waits.reduce((a: number, b) => a + (b ?? 0), 0)).toBeGreaterThanOrEqual(50);
    const owned = await t.pool.query(
      "select count(*)::int as n from jobs where id = any($1) and (owner is not null or execution_id is not null)",
      [ids],
    );
    expect(owned.rows[0].n).toBe(0);
    for (const id of ids) await api().call("POST", `/v1/jobs/${id}/cancel`);
  }, 120_000);

  it("SIGKILL while waiting loses nothing; SIGKILL while resuming is the fenced rule: that execution becomes lost, never re-run", async () => {
    await defineAgent("gated-kill", { tools: [{ name: "shell", requires_approval: true }] });
    const calm = await submit("gated-kill", shellCall("echo after-kill"));
    const slow = await submit("gated-kill", shellCall("echo started >> /workspace/log; sleep 30"));
    const [wc, ws] = await Promise.all([waiting(calm), waiting(slow)]);
    // Kill every host while both jobs wait: no owner holds them, so nothing is lost.
    for (const h of t.stack.hosts.splice(0)) {
      h.process.kill("SIGKILL");
    }
    await new Promise((r) => setTimeout(r, 2500));
    expect((await job(calm)).state).toBe("waiting");
    expect((await job(slow)).state).toBe("waiting");
    await t.stack.addHost();
    await t.stack.addHost();
    expect((await decide(calm, wc.waiting_for?.call_id as string, { decision: "approve" })).status).toBe(202);
    const done = await finished(calm);
    expect(done.state).toBe("completed");
    expect(done.output).toContain("after-kill");

    // Resume the slow one, and kill its host once the approved tool is running.
    expect((await decide(slow, ws.waiting_for?.call_id as string, { decision: "approve" })).status).toBe(202);
    // Two new hosts claim it, make its sandbox and start the tool: seconds when quiet, but a CI
    // run on a loaded machine once spent the old 30 s here; 60 s, and where it was if not.
    const seen: SseEvent[] = [];
    const ac = new AbortController();
    try {
      for await (const ev of readSse(`${t.stack.gatewayUrl}/v1/jobs/${slow}/events`, {
        headers: { authorization: `Bearer ${t.stack.apiKey}` },
        signal: AbortSignal.any([ac.signal, AbortSignal.timeout(60_000)]),
      })) {
        seen.push(ev);
        if (ev.event === "tool.call") break;
      }
    } catch (err) {
      throw new Error(
        `no tool.call of the resumed job (${String(err)}); events seen: ${seen.map((e) => e.event).join(",")}\n${await whereJobsAre([slow])}`,
      );
    }
    ac.abort();
    // Its recoveries used up (the default allows 3), so the reaper ends it `lost`, not recovered (recovery.test.ts has those).
    await t.pool.query("UPDATE jobs SET recoveries = 3 WHERE id = $1", [slow]);
    const owner = (await t.pool.query("select owner from jobs where id = $1", [slow])).rows[0]?.owner as string;
    const host = t.stack.hosts.find((h) => h.id === owner);
    expect(host, `owner ${owner} is one of this stack's hosts`).toBeDefined();
    host?.process.kill("SIGKILL");
    const lost = await finished(slow);
    expect(lost.state).toBe("lost");
    const execs = await executions(slow);
    expect(execs.map((e) => e.outcome)).toEqual(["suspended", "lost"]);
    const types = (await events(slow)).map((e) => e.event);
    expect(types.filter((x) => x === "tool.call")).toHaveLength(1);
    expect(types.at(-1)).toBe("run.lost");
    // The resumed execution started with run.resumed: no start is projected after its events.
    expect(types.filter((x) => x === "run.started")).toHaveLength(1);
    expect(types.indexOf("run.started")).toBeLessThan(types.indexOf("run.resumed"));
  }, 180_000);
});

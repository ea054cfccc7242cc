/**
 * Steps, forks and reruns on the real stack (docs/architecture.md, "Forks"): the gateway in
 * workerd, Postgres, Redis, two host processes, an OpenAI-compatible provider of the test's own
 * and a real MCP server (the official SDK) that records every tool call it receives. The source
 * job's journal rows are compared before and after every fork (0 changed), and the MCP server's
 * record shows no call of a fork's prefix made again (counted by call id: each call's argument is
 * its own id), while the calls a fork makes after its prefix are made.
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import { beforeAll, describe, expect, it } from "vitest";
import type { StepView } from "../../src/contracts/fork";
import type { JobView } from "../../src/contracts/job";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import type { ProviderRequest } from "../helpers/fake-provider";
import { useProviderStack } from "../helpers/provider-stack";
import { requireBinary } from "../helpers/require";
import { FAST_LOSS_HOST_ENV } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

/** How many echo calls a "chain" run makes, one per turn, before it answers. */
const CHAIN_CALLS = 3;

type Msg = { role: string; content: string | null; tool_call_id?: string };
const messagesOf = (req: ProviderRequest) => req.body.messages as Msg[];
/** The case a request belongs to: its first user message names it. */
const caseOf = (req: ProviderRequest) => String(messagesOf(req).find((m) => m.role === "user")?.content ?? "");

describe.skipIf(!canRun)("forks: steps, fork, rerun, never repeating a journaled call", () => {
  const killedOnce = new Set<string>();
  const never = new Promise<void>(() => {});
  const t = useProviderStack(
    (req) => {
      const messages = messagesOf(req);
      const results = messages.filter((m) => m.role === "tool");
      const last = messages.at(-1) as Msg;
      const system = messages.find((m) => m.role === "system")?.content ?? "";
      if (caseOf(req).startsWith("case:charge")) {
        // One charge call; then the answer says what its result was.
        if (results.length === 0) {
          return { kind: "stream", toolCalls: [{ id: `charge-${randomUUID()}`, name: "files__charge", args: {} }] };
        }
        // case:charge-kill: a fork's first turn after the prefix hangs once (its host is killed there).
        if (caseOf(req) === "case:charge-kill" && !killedOnce.has("fork")) {
          killedOnce.add("fork");
          return { kind: "stream", pieces: ["doomed"], until: never };
        }
        return { kind: "stream", pieces: [`saw: ${results.at(-1)?.content}`] };
      }
      // The chain: CHAIN_CALLS echo calls, one per turn, each argument the call's own id; then
      // the answer names the instructions, the last result and every user message after the first.
      if ((last.role === "user" && results.length === 0) || (last.role === "tool" && results.length < CHAIN_CALLS)) {
        const id = `chain-${randomUUID()}`;
        return { kind: "stream", toolCalls: [{ id, name: "files__echo", args: { text: id } }] };
      }
      const extra = messages
        .filter((m) => m.role === "user")
        .slice(1)
        .map((m) => m.content);
      return {
        kind: "stream",
        pieces: [`[${system}] last: ${results.at(-1)?.content}`, extra.length > 0 ? ` extra: ${extra.join("|")}` : ""],
      };
    },
    (allowed) => ({
      hosts: 2,
      gatewayVars: { MCP_ALLOWED_URLS: allowed },
      // A silent run is lost within ~4 s (the SIGKILL case). No sleep (HOST_SLEEP_MAX_MS=0): the
      // SIGKILL case needs the fork on the host that does not own its source, and a host asleep
      // over the source's held run would leave every fork to the source's owner.
      hostEnv: { ...FAST_LOSS_HOST_ENV, MCP_ALLOWED_URLS: allowed, SANDBOX_ENABLED: "false", HOST_SLEEP_MAX_MS: "0" },
    }),
  );
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const jobs = agentJobs<JobView>(api, () => "fake-model");
  const server = (tools: unknown[]) => t.server(tools);

  beforeAll(async () => {
    await jobs.defineAgent("chain", { instructions: "v1", mcp_servers: server(["echo"]) });
    // Version 2 of the same agent: other instructions (the answer names them).
    const v2 = await api().call("POST", "/v1/agents/chain/versions", {
      model: "fake-model",
      instructions: "v2",
      mcp_servers: server(["echo"]),
    });
    expect(v2.status, JSON.stringify(v2.body)).toBe(201);
  }, 60_000);
  /** Every journal row of a job exactly as stored (payload as text, times as epoch µs). */
  const journalRows = async (jobId: string) =>
    (
      await t.pool.query(
        `select seq, epoch, kind, payload::text as payload, extract(epoch from created_at)::text as at
         from job_journal where job_id = $1 order by seq`,
        [jobId],
      )
    ).rows;
  const steps = async (jobId: string, query = "") => {
    const r = await api().call<{ steps: StepView[]; next_after: number | null }>(
      "GET",
      `/v1/jobs/${jobId}/steps${query}`,
    );
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    return r.body;
  };
  const fork = async (jobId: string, body: Record<string, unknown> = {}, expected = 202) => {
    const r = await api().call<{ job: JobView }>("POST", `/v1/jobs/${jobId}/fork`, body);
    expect(r.status, JSON.stringify(r.body)).toBe(expected);
    return r.body.job;
  };
  const eventsOf = async (jobId: string) =>
    (await api().events(jobId)).map((e) => JSON.parse(e.data) as { type: string; payload: Record<string, unknown> });
  /** The echo calls the MCP server received for a job, by their argument (the call's id). */
  const echoedBy = (jobId: string) =>
    t.mcp.calls
      .filter((c) => c.tool === "echo" && c.headers["x-ear-job-id"] === jobId)
      .map((c) => (c.args as { text: string }).text);
  const completed = async (id: string) => {
    const j = await jobs.finished(id);
    expect(j.state, JSON.stringify(j)).toBe("completed");
    return j;
  };
  const chainInput = (name: string) => ({ input: { messages: [{ role: "user", content: `case:chain ${name}` }] } });

  let source: JobView;
  let sourceSteps: StepView[];
  let firstFork: JobView;

  it("GET /v1/jobs/{id}/steps lists the journal in order, paged, with call ids, tools and executions", async () => {
    source = await completed(await jobs.submit("chain@1", chainInput("source")));
    expect(source.output).toContain("[v1] last: echo: chain-");
    sourceSteps = (await steps(source.id, "?limit=100")).steps;
    // Per call: the turn (riding on the call's write), the call, the result.
    expect(sourceSteps.map((s) => s.kind)).toEqual(
      Array.from({ length: CHAIN_CALLS }, () => ["turn", "call", "result"]).flat(),
    );
    expect(sourceSteps.map((s) => s.step)).toEqual(sourceSteps.map((_, i) => i + 1));
    const calls = sourceSteps.filter((s) => s.kind === "call");
    expect(calls.map((s) => s.tool)).toEqual(Array(CHAIN_CALLS).fill("files__echo"));
    expect(new Set(calls.map((s) => s.call_id)).size).toBe(CHAIN_CALLS);
    expect(echoedBy(source.id)).toEqual(calls.map((s) => s.call_id));
    const result = sourceSteps[2] as StepView;
    expect(result).toMatchObject({ kind: "result", call_id: calls[0]?.call_id, tool: "files__echo" });
    expect(result.summary).toBe(`echo: ${calls[0]?.call_id}`);
    expect(sourceSteps[0]?.summary).toContain("turn 1 called files__echo");
    for (const s of sourceSteps) expect(s.execution_id).toBe(source.execution_id);
    // Pages: 4, then 4, then the last one.
    const first = await steps(source.id, "?limit=4");
    expect(first.steps.map((s) => s.step)).toEqual([1, 2, 3, 4]);
    expect(first.next_after).toBe(4);
    const second = await steps(source.id, `?limit=4&after=${first.next_after}`);
    expect(second.steps.map((s) => s.step)).toEqual([5, 6, 7, 8]);
    const third = await steps(source.id, "?limit=4&after=8");
    expect(third.steps.map((s) => s.step)).toEqual([9]);
    expect(third.next_after).toBeNull();
    expect((await api().call("GET", `/v1/jobs/${source.id}/steps?limit=0`)).status).toBe(400);
    expect((await api().call("GET", `/v1/jobs/${source.id}/steps?after=-1`)).status).toBe(400);
  }, 60_000);

  it("fork from step 6: its own job, run.forked first, the prefix read and never written, no prefix call made again", async () => {
    const before = await journalRows(source.id);
    const f = await fork(source.id, { from_step: 6 });
    expect(f.id).not.toBe(source.id);
    expect(f.state).toBe("queued");
    expect(f.forked_from).toEqual({ job_id: source.id, step: 6 });
    expect(f.agent).toEqual(source.agent);
    const done = await completed(f.id);
    firstFork = done;
    expect(done.recoveries).toBe(0);
    expect(done.forked_from).toEqual({ job_id: source.id, step: 6 });

    const events = await eventsOf(f.id);
    expect(events[0]).toMatchObject({ type: "run.forked", payload: { from_job: source.id, from_step: 6 } });
    expect(events.filter((e) => e.type === "run.started" || e.type === "run.recovered")).toEqual([]);

    // The source is untouched: every journal row as it was, its row still its own.
    expect(await journalRows(source.id)).toEqual(before);
    expect((await jobs.job(source.id)).output).toBe(source.output);
    // No call of the prefix was made again; the one after it was made, once, by the fork.
    const prefixCalls = sourceSteps
      .slice(0, 6)
      .filter((s) => s.kind === "call")
      .map((s) => s.call_id);
    expect(prefixCalls).toHaveLength(2);
    const made = echoedBy(f.id);
    expect(made.filter((id) => prefixCalls.includes(id))).toEqual([]);
    expect(made).toHaveLength(1);
    expect(done.output).toContain(`last: echo: ${made[0]}`);

    // The fork's steps: the prefix as the source's (no execution of the fork's), then its own.
    const mine = (await steps(f.id, "?limit=100")).steps;
    const strip = (s: StepView) => ({
      step: s.step,
      kind: s.kind,
      summary: s.summary,
      call_id: s.call_id,
      tool: s.tool,
    });
    expect(mine.slice(0, 6).map(strip)).toEqual(sourceSteps.slice(0, 6).map(strip));
    for (const s of mine.slice(0, 6)) expect(s.execution_id).toBeNull();
    // Then the fork's `recovered` row (its first execution starting from the prefix) and its own steps.
    expect(mine[6]).toMatchObject({ step: 7, kind: "recovered", execution_id: done.execution_id });
    expect(mine.slice(7).map((s) => s.kind)).toEqual(["turn", "call", "result"]);
    expect(mine.at(-1)?.call_id).toBe(made[0]);
  }, 60_000);

  it("a fork of a fork with replace_result: the replaced result is what the model reads, nothing is called, no journal changes", async () => {
    const f1 = firstFork;
    const f1Steps = (await steps(f1.id, "?limit=100")).steps;
    const lastCall = f1Steps.filter((s) => s.kind === "result").at(-1) as StepView;
    const [sourceBefore, f1Before] = [await journalRows(source.id), await journalRows(f1.id)];
    const callsBefore = t.mcp.calls.length;
    const f2 = await fork(f1.id, { replace_result: { call_id: lastCall.call_id, result: "REPLACED" } });
    expect(f2.forked_from).toEqual({ job_id: f1.id, step: f1Steps.length });
    const done = await completed(f2.id);
    expect(done.output).toContain("last: REPLACED");
    expect(t.mcp.calls.length).toBe(callsBefore);
    expect(await journalRows(source.id)).toEqual(sourceBefore);
    expect(await journalRows(f1.id)).toEqual(f1Before);
    // The replaced step reads as the new result in the fork, as the old one in its source.
    const f2Steps = (await steps(f2.id, "?limit=100")).steps;
    expect(f2Steps.find((s) => s.step === lastCall.step)?.summary).toBe("REPLACED");
    expect((await steps(f1.id, "?limit=100")).steps.find((s) => s.step === lastCall.step)?.summary).toBe(
      lastCall.summary,
    );
    const events = await eventsOf(f2.id);
    expect(events[0]).toMatchObject({ type: "run.forked", payload: { from_job: f1.id, from_step: f1Steps.length } });
  }, 60_000);

  it("fork with another agent version and appended messages; rerun from step 0 with the original input", async () => {
    const f = await fork(source.id, {
      from_step: 9,
      agent: "chain@2",
      append_messages: [{ role: "user", content: "and now?" }],
    });
    expect(f.agent).toEqual({ name: "chain", version: 2 });
    const done = await completed(f.id);
    expect(done.output).toContain("[v2]");
    expect(done.output).toContain("extra: and now?");
    // Step 9 was the last result: the answer is a model turn of the fork's, no tool was called.
    expect(echoedBy(f.id)).toEqual([]);

    const r = await api().call<{ job: JobView }>("POST", `/v1/jobs/${source.id}/rerun`);
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    expect(r.body.job.forked_from).toEqual({ job_id: source.id, step: 0 });
    expect(r.body.job.agent).toEqual({ name: "chain", version: 1 });
    const rerun = await completed(r.body.job.id);
    // From step 0: every call is the rerun's own (new ids), none of the source's.
    const made = echoedBy(rerun.id);
    expect(made).toHaveLength(CHAIN_CALLS);
    expect(made.filter((id) => echoedBy(source.id).includes(id))).toEqual([]);
    const events = await eventsOf(rerun.id);
    expect(events[0]).toMatchObject({ type: "run.forked", payload: { from_job: source.id, from_step: 0 } });
    const v2 = await api().call<{ job: JobView }>("POST", `/v1/jobs/${source.id}/rerun`, { agent: "chain@2" });
    expect(v2.status).toBe(202);
    expect((await completed(v2.body.job.id)).output).toContain("[v2]");
  }, 90_000);

  it("an in-flight call at the fork point is not made again, even when declared idempotent; replace_result gives its result", async () => {
    await jobs.defineAgent("charger", { mcp_servers: server([{ name: "charge", idempotent: true }]) });
    const id = await jobs.submit("charger", { input: { messages: [{ role: "user", content: "case:charge" }] } });
    // The charge hangs at the MCP server (its first ask under a key): the source runs on.
    await waitFor("the charge to reach the server", async () =>
      t.mcp.calls.some((c) => c.tool === "charge" && c.headers["x-ear-job-id"] === id) ? true : null,
    );
    const running = (await steps(id)).steps;
    expect(running.map((s) => s.kind)).toEqual(["turn", "call"]);
    const callId = running[1]?.call_id as string;
    const before = await journalRows(id);

    const f = await fork(id);
    expect(f.forked_from).toEqual({ job_id: id, step: 2 });
    const done = await completed(f.id);
    expect(done.output).toContain("outcome_unknown");
    const charges = (job: string) =>
      t.mcp.calls.filter((c) => c.tool === "charge" && c.headers["x-ear-job-id"] === job);
    expect(charges(f.id)).toEqual([]);
    const events = await eventsOf(f.id);
    expect(events.find((e) => e.type === "tool.result")).toMatchObject({
      payload: { id: callId, ok: false, output: { code: "outcome_unknown" } },
    });

    const given = await fork(id, { replace_result: { call_id: callId, result: { charged: "by hand" } } });
    const answered = await completed(given.id);
    expect(answered.output).toBe('saw: {"charged":"by hand"}');
    expect(charges(given.id)).toEqual([]);
    // A fork after the fork point's call with appended messages is refused: the call is open.
    const open = await api().call("POST", `/v1/jobs/${id}/fork`, {
      append_messages: [{ role: "user", content: "x" }],
    });
    expect(open.status).toBe(400);
    expect(JSON.stringify(open.body)).toContain(callId);

    expect(await journalRows(id)).toEqual(before);
    expect((await api().call("POST", `/v1/jobs/${id}/cancel`)).status).toBe(202);
    expect(charges(id)).toHaveLength(1);
  }, 90_000);

  it("another tenant's job is 404 on steps, fork and rerun; bad bodies are 400; idempotency keys replay", async () => {
    const db = drizzle(t.pool, { schema });
    await createTenant(db, "fork-other");
    const other = apiClient(t.stack.gatewayUrl, (await createApiKey(db, "fork-other")).key);
    expect((await other.call("GET", `/v1/jobs/${source.id}/steps`)).status).toBe(404);
    expect((await other.call("POST", `/v1/jobs/${source.id}/fork`, {})).status).toBe(404);
    expect((await other.call("POST", `/v1/jobs/${source.id}/rerun`)).status).toBe(404);
    expect((await api().call("GET", `/v1/jobs/${randomUUID()}/steps`)).status).toBe(404);
    expect((await api().call("GET", "/v1/jobs/not-a-job/steps")).status).toBe(404);
    expect((await api().call("POST", `/v1/jobs/${randomUUID()}/fork`, {})).status).toBe(404);

    const bad = async (body: unknown, says: string) => {
      const r = await api().call<{ error: { code: string; message: string } }>(
        "POST",
        `/v1/jobs/${source.id}/fork`,
        body,
      );
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error.message).toContain(says);
    };
    await bad({ from_step: -1 }, "from_step");
    await bad({ from_step: 10 }, "has 9 steps");
    await bad({ from_step: "3" }, "from_step");
    await bad({ nope: 1 }, "nope");
    await bad({ replace_result: { call_id: "no-such-call", result: "x" } }, "no tool call");
    await bad({ agent: "no-such-agent" }, "no agent named");
    await bad("{not json", "JSON");
    const rerunBad = await api().call("POST", `/v1/jobs/${source.id}/rerun`, { from_step: 2 });
    expect(rerunBad.status).toBe(400);

    const key = `fork-${randomUUID()}`;
    const a = await fork(source.id, { from_step: 9, idempotency_key: key });
    const b = await fork(source.id, { from_step: 9, idempotency_key: key }, 200);
    expect(b.id).toBe(a.id);
    const c = await api().call("POST", `/v1/jobs/${source.id}/fork`, { from_step: 8, idempotency_key: key });
    expect(c.status).toBe(409);
    await completed(a.id);
  }, 60_000);

  it("POST /v1/replays reruns every job the filter selects as one batch; GET /v1/replays/{id} pairs them and shows progress", async () => {
    // Two more jobs of chain@1, made after a mark; the replay takes exactly those (newest first).
    const mark = new Date().toISOString();
    const a = await completed(await jobs.submit("chain@1", chainInput("replay a")));
    const b = await completed(await jobs.submit("chain@1", chainInput("replay b")));
    const [aBefore, bBefore] = [await journalRows(a.id), await journalRows(b.id)];
    const r = await api().call<{ replay: { id: string; jobs_total: number } }>("POST", "/v1/replays", {
      filter: { agent: "chain@1", state: "completed", since: mark, limit: 10 },
      agent: "chain@2",
    });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    expect(r.body.replay.jobs_total).toBe(2);
    type Replay = {
      jobs_total: number;
      finished: number;
      progress: Record<string, number>;
      agent: string | null;
      jobs: Array<{ source_job_id: string; job_id: string; state: string }>;
    };
    const read = async () => {
      const g = await api().call<{ replay: Replay }>("GET", `/v1/replays/${r.body.replay.id}`);
      expect(g.status, JSON.stringify(g.body)).toBe(200);
      return g.body.replay;
    };
    const done = await waitFor("the replay to finish", async () => {
      const replay = await read();
      return replay.finished === replay.jobs_total ? replay : null;
    });
    expect(done.agent).toBe("chain@2");
    expect(done.progress).toEqual({ completed: 2 });
    expect(done.jobs.map((j) => j.source_job_id)).toEqual([b.id, a.id]);
    for (const pair of done.jobs) {
      const rerun = await jobs.job(pair.job_id);
      expect(rerun.forked_from).toEqual({ job_id: pair.source_job_id, step: 0 });
      expect(rerun.agent).toEqual({ name: "chain", version: 2 });
      expect(rerun.output).toContain("[v2]");
      // From step 0: the rerun's calls are its own, none of its source's.
      const mine = echoedBy(pair.job_id);
      expect(mine).toHaveLength(CHAIN_CALLS);
      expect(mine.filter((id) => echoedBy(pair.source_job_id).includes(id))).toEqual([]);
    }
    expect(await journalRows(a.id)).toEqual(aBefore);
    expect(await journalRows(b.id)).toEqual(bBefore);

    // Nothing selected: a replay of no jobs. Bad filters are 400; another tenant's replay is 404.
    const none = await api().call<{ replay: { jobs_total: number } }>("POST", "/v1/replays", {
      filter: { agent: "no-such-agent" },
    });
    expect(none.status).toBe(202);
    expect(none.body.replay.jobs_total).toBe(0);
    expect((await api().call("POST", "/v1/replays", { filter: { limit: 1001 } })).status).toBe(400);
    expect((await api().call("POST", "/v1/replays", { filter: { state: "nope" } })).status).toBe(400);
    expect((await api().call("POST", "/v1/replays", {})).status).toBe(400);
    expect((await api().call("GET", `/v1/replays/${randomUUID()}`)).status).toBe(404);
    expect((await api().call("GET", "/v1/replays/not-an-id")).status).toBe(404);
    const db = drizzle(t.pool, { schema });
    await createTenant(db, "replay-other");
    const other = apiClient(t.stack.gatewayUrl, (await createApiKey(db, "replay-other")).key);
    expect((await other.call("GET", `/v1/replays/${r.body.replay.id}`)).status).toBe(404);
    // The other tenant's filter sees none of this tenant's jobs.
    const theirs = await other.call<{ replay: { jobs_total: number } }>("POST", "/v1/replays", { filter: {} });
    expect(theirs.body.replay.jobs_total).toBe(0);
  }, 90_000);

  it("a fork's host SIGKILLed in its first turn: the fork recovers as its own (recoveries 1), the source's in-flight call is still never made", async () => {
    const id = await jobs.submit("charger", { input: { messages: [{ role: "user", content: "case:charge-kill" }] } });
    await waitFor("the charge to reach the server", async () =>
      t.mcp.calls.some((c) => c.tool === "charge" && c.headers["x-ear-job-id"] === id) ? true : null,
    );
    const before = await journalRows(id);
    const sourceHost = await t.ownerOf(id);
    // The fork's first turn (after the prefix's call got outcome_unknown) hangs: kill its host
    // there. The fork must run on the other host (killing the source's would recover the source
    // too): a fork its source's host claimed is cancelled and made again (each try lands on
    // either host), up to 10 tries.
    let f = { id: "" };
    for (let attempt = 1; ; attempt++) {
      killedOnce.delete("fork");
      f = await fork(id);
      await waitFor("the fork's first turn", async () => (killedOnce.has("fork") ? true : null));
      await waitFor("the fork to be owned", async () => ((await t.ownerOf(f.id)) !== null ? true : null));
      if ((await t.ownerOf(f.id)) !== sourceHost) break;
      expect(attempt, "every fork was claimed by its source's host").toBeLessThan(10);
      expect((await api().call("POST", `/v1/jobs/${f.id}/cancel`)).status).toBe(202);
    }
    await t.killOwner(f.id);
    const done = await completed(f.id);
    expect(done.recoveries).toBe(1);
    expect(done.output).toContain("outcome_unknown");
    expect(done.forked_from).toEqual({ job_id: id, step: 2 });
    const types = (await eventsOf(f.id)).map((e) => e.type);
    expect(types[0]).toBe("run.forked");
    expect(types.filter((x) => x === "run.forked")).toHaveLength(1);
    expect(types.filter((x) => x === "run.recovered")).toHaveLength(1);
    expect(t.mcp.calls.filter((c) => c.tool === "charge" && c.headers["x-ear-job-id"] === f.id)).toEqual([]);
    // The source: its journal as it was, its recoveries its own (none).
    expect(await journalRows(id)).toEqual(before);
    expect((await jobs.job(id)).recoveries).toBe(0);
    expect((await api().call("POST", `/v1/jobs/${id}/cancel`)).status).toBe(202);
  }, 90_000);
});

/**
 * A run survives its host (docs/architecture.md, "Recovery"): real host processes (two, more added as they are killed),
 * the gateway in workerd, Postgres, Redis, an OpenAI-compatible provider of the test's own and a
 * real MCP server. A host is SIGKILLed mid-run; the reaper (another host's) finds the owner gone
 * and re-queues the job for a new execution that continues from the journal: completed steps
 * are not repeated, a tool call in flight is repeated only when declared idempotent (with the
 * same idempotency key), and an agent with `on_host_loss: "fail"` ends `lost` as before. A
 * recovering execution whose host dies before its outbox delivered anything still shows on the
 * stream: the gateway projects its `run.recovered` from Postgres.
 */
import { describe, expect, it } from "vitest";
import type { SseEvent } from "../../tools/lib/sse";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import type { ProviderRequest } from "../helpers/fake-provider";
import { useProviderStack } from "../helpers/provider-stack";
import { requireBinary } from "../helpers/require";
import { FAST_LOSS_HOST_ENV } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

interface Job {
  id: string;
  state: string;
  output: string | null;
  recoveries: number;
  error: { code: string } | null;
  waiting_for: { call_id: string; question: string | null } | null;
}

const FINAL_ANSWER = ["the ", "answer ", "is ", "42"];
const DEPLOYED_ANSWER = ["answered ", "by ", "the ", "next ", "host"];
const RELOST_ANSWER = ["third ", "time ", "lucky"];
/** A short shutdown grace, so that a SIGTERM hands the run off within the test. */
const GRACE_MS = 500;

/** The case a request belongs to: its first user message names it. */
const caseOf = (req: ProviderRequest): string =>
  String(req.body.messages.find((m: { role: string }) => m.role === "user")?.content ?? "");
const lastOf = (req: ProviderRequest) => req.body.messages.at(-1) as { role: string; content: string };

describe.skipIf(!canRun)("recovery: a run survives its host", () => {
  /** Asked once per case: the first final turn of case "final" hangs (the host is killed during it). */
  const heldOnce = new Set<string>();
  const never = new Promise<void>(() => {});
  const t = useProviderStack(
    (req) => {
      const which = caseOf(req);
      const last = lastOf(req);
      if (which === "case:fail") return { kind: "stream", pieces: ["never"], until: never };
      if (which === "case:relost") {
        // The first two executions hang in their first turn (each host is killed there); the third answers.
        const n = t.provider.requests.filter((r) => caseOf(r) === which).length;
        return n <= 2
          ? { kind: "stream", pieces: [`doomed ${n} `], until: never }
          : { kind: "stream", pieces: RELOST_ANSWER };
      }
      if (which === "case:deploy") {
        // The first answer outlives the stopping host's grace; the next execution's is quick.
        if (heldOnce.has(which)) return { kind: "stream", pieces: DEPLOYED_ANSWER };
        heldOnce.add(which);
        return { kind: "stream", pieces: ["doomed"], until: never };
      }
      if (last.role === "user") {
        const tool = which === "case:final" ? "files__echo" : "files__charge";
        return {
          kind: "stream",
          toolCalls: [{ id: `call-${which}`, name: tool, args: which === "case:final" ? { text: "hi" } : {} }],
        };
      }
      if (which === "case:final" && !heldOnce.has(which)) {
        heldOnce.add(which);
        return { kind: "stream", pieces: ["doomed ", "text"], until: never };
      }
      if (which === "case:final") return { kind: "stream", pieces: FINAL_ANSWER };
      // The charge cases: the model says what the tool result was.
      return { kind: "stream", pieces: [`saw: ${last.content}`] };
    },
    (allowed) => ({
      hosts: 2,
      gatewayVars: { MCP_ALLOWED_URLS: allowed },
      hostEnv: {
        ...FAST_LOSS_HOST_ENV,
        MCP_ALLOWED_URLS: allowed,
        SANDBOX_ENABLED: "false",
        HOST_SHUTDOWN_GRACE_MS: String(GRACE_MS),
      },
    }),
  );
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const jobs = agentJobs<Job>(api, () => "fake-model");
  const server = (tools: unknown[]) => t.server(tools);
  const ownerOf = (jobId: string) => t.ownerOf(jobId);
  const killOwner = (jobId: string) => t.killOwner(jobId);
  const callsOf = (jobId: string, tool: string) =>
    t.mcp.calls.filter((c) => c.tool === tool && c.headers["x-ear-job-id"] === jobId);
  const eventsOf = async (jobId: string) => (await api().events(jobId)).map((e: SseEvent) => JSON.parse(e.data));

  it("refuses a recovery setting out of range with a clear 400", async () => {
    const bad = await api().call("POST", "/v1/agents", {
      name: "bad-recovery",
      model: "fake-model",
      recovery: { on_host_loss: "retry", max_recoveries: 11 },
    });
    expect(bad.status).toBe(400);
    const message = (bad.body as { error: { code: string; message: string } }).error.message;
    expect(message).toContain("recovery.on_host_loss");
    expect(message).toContain("recovery.max_recoveries");
  });

  it("SIGKILL during the final turn after a completed tool call: completed, the tool ran once, run.recovered host_lost, recoveries 1, the deltas after run.recovered are the output", async () => {
    await jobs.defineAgent("rec-final", { mcp_servers: server(["echo"]) });
    const id = await jobs.submit("rec-final", { input: { messages: [{ role: "user", content: "case:final" }] } });
    await waitFor(
      "the final turn to start",
      async () => t.provider.requests.some((r) => caseOf(r) === "case:final" && lastOf(r).role === "tool") || null,
      { timeoutMs: 30_000, intervalMs: 20 },
    );
    const killedAt = Date.now();
    await killOwner(id);
    const job = await jobs.finished(id, 60_000);
    expect(job).toMatchObject({ state: "completed", output: FINAL_ANSWER.join(""), recoveries: 1 });
    expect(callsOf(id, "echo")).toHaveLength(1);

    const events = await eventsOf(id);
    const types = events.map((e) => e.type);
    expect(types).not.toContain("run.failed");
    expect(types).not.toContain("run.lost");
    const at = types.lastIndexOf("run.recovered");
    expect(events[at]?.payload).toEqual({
      reason: "host_lost",
      from_step: 3,
      discarded_turn: true,
      unknown_calls: [],
      sandbox_reset: false,
    });
    // The new execution's events follow run.recovered, under a higher epoch.
    expect(events[at].epoch).toBeGreaterThan(events[0].epoch);
    const deltas = events.slice(at).filter((e) => e.type === "model.delta");
    expect(deltas.map((e) => e.payload.text).join("")).toBe(job.output);
    expect(events.slice(at + 1).find((e) => e.type === "model.turn")?.payload).toEqual({
      turn: 2,
      reason: "recovered",
    });
    // The recovered turn saw the tool result the journal kept (not a repeated call).
    const retried = t.provider.requests.filter((r) => caseOf(r) === "case:final" && lastOf(r).role === "tool");
    expect(retried).toHaveLength(2);
    expect(lastOf(retried[1] as ProviderRequest).content).toBe("echo: hi");
    console.log(`[recovery] SIGKILL → completed in ${Date.now() - killedAt} ms`);
  });

  it("SIGKILL during a non-idempotent MCP call: not repeated, the model reads outcome_unknown, the job completes", async () => {
    await jobs.defineAgent("rec-charge", { mcp_servers: server(["charge"]) });
    const id = await jobs.submit("rec-charge", { input: { messages: [{ role: "user", content: "case:charge" }] } });
    await waitFor("the charge call", async () => callsOf(id, "charge").length > 0 || null, {
      timeoutMs: 30_000,
      intervalMs: 20,
    });
    await killOwner(id);
    const job = await jobs.finished(id, 60_000);
    expect(job.state).toBe("completed");
    expect(job.recoveries).toBe(1);
    expect(callsOf(id, "charge")).toHaveLength(1);
    expect(job.output).toContain("outcome_unknown");
    const events = await eventsOf(id);
    const recovered = events.find((e) => e.type === "run.recovered");
    expect(recovered?.payload).toMatchObject({
      reason: "host_lost",
      unknown_calls: ["call-case:charge"],
      discarded_turn: false,
    });
    const result = events.filter((e) => e.type === "tool.result").at(-1);
    expect(result?.payload).toMatchObject({ id: "call-case:charge", ok: false, output: { code: "outcome_unknown" } });
  });

  it("the same with idempotent: true: called again with the same idempotency key", async () => {
    await jobs.defineAgent("rec-charge-idem", { mcp_servers: server([{ name: "charge", idempotent: true }]) });
    const id = await jobs.submit("rec-charge-idem", {
      input: { messages: [{ role: "user", content: "case:charge-idem" }] },
    });
    await waitFor("the charge call", async () => callsOf(id, "charge").length > 0 || null, {
      timeoutMs: 30_000,
      intervalMs: 20,
    });
    await killOwner(id);
    const job = await jobs.finished(id, 60_000);
    expect(job).toMatchObject({ state: "completed", recoveries: 1 });
    const calls = callsOf(id, "charge");
    expect(calls).toHaveLength(2);
    const keys = calls.map((c) => c.headers["x-ear-idempotency-key"]);
    expect(keys[0]).toBe(`${id}:call-case:charge-idem`);
    expect(keys[1]).toBe(keys[0]);
    // Two executions: the second one's epoch is higher.
    expect(Number(calls[1]?.headers["x-ear-epoch"])).toBeGreaterThan(Number(calls[0]?.headers["x-ear-epoch"]));
    expect(job.output).toBe(`saw: charged once under ${keys[0]}`);
  });

  it("SIGKILL during an approved call that requires approval: a person is asked again, told the outcome is unknown", async () => {
    await jobs.defineAgent("rec-approve", { mcp_servers: server([{ name: "charge", requires_approval: true }]) });
    const id = await jobs.submit("rec-approve", { input: { messages: [{ role: "user", content: "case:approve" }] } });
    const callId = (await jobs.waiting(id)).waiting_for?.call_id as string;
    const decide = (decision: string) =>
      api().call("POST", `/v1/jobs/${id}/approvals/${encodeURIComponent(callId)}`, { decision });
    expect((await decide("approve")).status).toBe(202);
    await waitFor("the approved call", async () => callsOf(id, "charge").length > 0 || null, {
      timeoutMs: 30_000,
      intervalMs: 20,
    });
    await killOwner(id);
    const again = await jobs.waiting(id, 30_000);
    expect(again.recoveries).toBe(1);
    expect(again.waiting_for).toMatchObject({ call_id: callId });
    expect(again.waiting_for?.question).toContain("unknown");
    expect((await decide("deny")).status).toBe(202);
    const job = await jobs.finished(id, 60_000);
    expect(job.state).toBe("completed");
    expect(callsOf(id, "charge")).toHaveLength(1);
    expect(job.output).toContain("denied");
    const asked = (await eventsOf(id)).filter((e) => e.type === "tool.approval_requested");
    expect(asked).toHaveLength(2);
    expect(asked[0].payload.note).toBeUndefined();
    expect(asked[1].payload.note).toContain("unknown");
  });

  it("SIGTERM mid-answer with a short grace: handed off at once, completed by another host, never run.failed", async () => {
    await jobs.defineAgent("rec-deploy", {});
    const id = await jobs.submit("rec-deploy", { input: { messages: [{ role: "user", content: "case:deploy" }] } });
    await waitFor(
      "the answer to start",
      async () => t.provider.requests.some((r) => caseOf(r) === "case:deploy") || null,
      {
        timeoutMs: 30_000,
        intervalMs: 20,
      },
    );
    const owner = await ownerOf(id);
    const host = t.stack.hosts.find((h) => h.id === owner);
    expect(host, `owner ${owner} is one of this stack's hosts`).toBeDefined();
    const termAt = Date.now();
    host?.process.kill("SIGTERM");
    const job = await jobs.finished(id, 60_000);
    expect(job).toMatchObject({ state: "completed", output: DEPLOYED_ANSWER.join(""), recoveries: 1 });
    const events = await eventsOf(id);
    const types = events.map((e) => e.type);
    expect(types).not.toContain("run.failed");
    const recovered = events.find((e) => e.type === "run.recovered");
    expect(recovered?.payload).toEqual({
      reason: "host_shutdown",
      from_step: 0,
      discarded_turn: true,
      unknown_calls: [],
      sandbox_reset: false,
    });
    const execs = await t.pool.query<{ host: string; outcome: string }>(
      "SELECT host, outcome FROM executions WHERE job_id = $1 ORDER BY epoch",
      [id],
    );
    expect(execs.rows.map((r) => r.outcome)).toEqual(["handed_off", "completed"]);
    expect(execs.rows[1]?.host).not.toBe(owner);
    // Handed off after the grace, not after the lost bound (4 s here): running elsewhere soon after.
    const handOffMs = Date.parse(recovered.ts) - termAt;
    expect(handOffMs).toBeLessThan(GRACE_MS + 3000);
    console.log(`[recovery] SIGTERM → run.recovered on another host in ${handOffMs} ms (grace ${GRACE_MS} ms)`);
    await t.stack.addHost();
  });

  it('on_host_loss: "fail": the job ends lost, as before recovery existed', async () => {
    await jobs.defineAgent("rec-fail", { recovery: { on_host_loss: "fail" } });
    const id = await jobs.submit("rec-fail", { input: { messages: [{ role: "user", content: "case:fail" }] } });
    await waitFor("the first turn", async () => t.provider.requests.some((r) => caseOf(r) === "case:fail") || null, {
      timeoutMs: 30_000,
      intervalMs: 20,
    });
    await killOwner(id);
    const job = await jobs.finished(id, 60_000);
    expect(job).toMatchObject({ state: "lost", recoveries: 0, error: { code: "lost" } });
    const types = (await eventsOf(id)).map((e) => e.type);
    expect(types).not.toContain("run.recovered");
    expect(types.at(-1)).toBe("run.lost");
  });

  it("a recovering host SIGKILLed before its outbox delivered anything: its run.recovered is still on the stream, once, projected from Postgres, then the next recovery's own", async () => {
    const asked = () => t.provider.requests.filter((r) => caseOf(r) === "case:relost").length;
    await jobs.defineAgent("rec-relost", {});
    const id = await jobs.submit("rec-relost", { input: { messages: [{ role: "user", content: "case:relost" }] } });
    await waitFor("the first turn", async () => asked() >= 1 || null, { timeoutMs: 30_000, intervalMs: 20 });
    const alive = t.stack.hosts.filter((h) => h.process.exitCode === null && h.process.signalCode === null);
    const ownerA = await ownerOf(id);
    const hostA = alive.find((h) => h.id === ownerA);
    expect(hostA, `owner ${ownerA} is one of this stack's hosts`).toBeDefined();
    // A host whose outbox cannot reach the gateway (nothing listens on port 9): every event it
    // emits dies with it. The other hosts are paused, so it is the one that recovers the job.
    const mute = await t.stack.addHost({ GATEWAY_URL: "http://127.0.0.1:9" });
    const paused = alive.filter((h) => h !== hostA);
    for (const h of paused) h.process.kill("SIGSTOP");
    try {
      hostA?.process.kill("SIGKILL");
      // The mute host reaped the job, recovered it (journal row written, run.recovered emitted
      // into an outbox that cannot deliver) and asked its first turn again: kill it there.
      await waitFor("the mute host's recovered turn", async () => asked() >= 2 || null, {
        timeoutMs: 30_000,
        intervalMs: 20,
      });
      expect(await ownerOf(id)).toBe(mute.id);
      mute.process.kill("SIGKILL");
    } finally {
      for (const h of paused) h.process.kill("SIGCONT");
    }
    await t.stack.addHost();
    const job = await jobs.finished(id, 60_000);
    expect(job).toMatchObject({ state: "completed", output: RELOST_ANSWER.join(""), recoveries: 2 });

    const execs = (
      await t.pool.query<{ id: string; host: string; outcome: string }>(
        "SELECT id, host, outcome FROM executions WHERE job_id = $1 ORDER BY epoch",
        [id],
      )
    ).rows;
    expect(execs.map((r) => r.outcome)).toEqual(["lost", "lost", "completed"]);
    expect(execs[1]?.host).toBe(mute.id);
    const events = await eventsOf(id);
    const recovered = events.filter((e) => e.type === "run.recovered");
    expect(recovered.map((e) => [e.execution_id, e.payload.source])).toEqual([
      [execs[1]?.id, "projector"],
      [execs[2]?.id, undefined],
    ]);
    // The mute host wrote its journal row before it died: the projected event carries all of it.
    expect(recovered[0].payload).toEqual({
      source: "projector",
      reason: "host_lost",
      from_step: 0,
      discarded_turn: true,
      unknown_calls: [],
      sandbox_reset: false,
    });
    // In order: the first execution's events, the projected recovery, then the last execution's.
    const at = events.indexOf(recovered[0]);
    expect(events.slice(0, at).every((e) => e.execution_id === execs[0]?.id)).toBe(true);
    expect(events.slice(at + 1).every((e) => e.execution_id === execs[2]?.id)).toBe(true);
    expect(events.slice(at + 1)[0]).toBe(recovered[1]);
    const deltas = events.slice(events.indexOf(recovered[1])).filter((e) => e.type === "model.delta");
    expect(deltas.map((e) => e.payload.text).join("")).toBe(job.output);
    expect(events.at(-1)?.type).toBe("run.completed");
  });
});

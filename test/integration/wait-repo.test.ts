/**
 * The waitpoint's statements on a real Postgres: the fenced suspend (job `waiting`, no owner, no
 * execution, the execution `suspended`), which only the current owner can make; a decision
 * re-queues the job into the claimable condition, is recorded once and read back; cancel while
 * waiting ends the job at once; a deadline denies or fails as configured; an answer to ask_user is
 * an input that re-queues the job.
 */
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { requestCancel, submitInput } from "../../src/db/control-repo";
import { executions, jobs, jobWaits } from "../../src/db/schema";
import { decideApproval, expireWaits, resumeDecision, type Suspension, suspendJob } from "../../src/db/wait-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { claimJob, markStarted } from "../../tools/lib/single-row-writes";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ tenants: ["w1", "w2"] });
let t: TestDb;
test.beforeAll(({ testDb }) => {
  t = testDb;
});

const suspension = (callId: string, over: Partial<Suspension> = {}): Suspension => ({
  kind: "approval",
  callId,
  tool: "shell",
  arguments: { command: "rm -rf /tmp/x" },
  question: null,
  deadlineS: 3600,
  onDeadline: "deny",
  checkpoint: { v: 1, pending: { id: callId } },
  ...over,
});

/** A job started by host h: its full execution identity. */
async function running(): Promise<ExecutionIdentity> {
  const jobId = randomUUID();
  await t.db.insert(jobs).values({ id: jobId, tenantId: "w1", input: { messages: [{ role: "user", content: "x" }] } });
  const token = randomUUID();
  const epoch = (await claimJob(t.db, jobId, "h", token)) as number;
  const id = { jobId, host: "h", epoch, token, executionId: randomUUID() };
  expect(await markStarted(t.db, id)).toBe(true);
  return id;
}
const row = async (id: string) => (await t.db.select().from(jobs).where(eq(jobs.id, id)))[0];

describe("the waitpoint in Postgres", () => {
  it("suspend: only the owner; the job waits holding no owner, claim or execution; the execution ends suspended", async () => {
    const id = await running();
    expect(await suspendJob(t.db, { ...id, epoch: id.epoch + 1 }, suspension("c1"))).toEqual({
      suspended: false,
      cancelRequested: false,
    });
    const s = await suspendJob(t.db, id, suspension("c1"));
    expect(s.suspended).toBe(true);
    const r = await row(id.jobId);
    expect(r).toMatchObject({ state: "waiting", owner: null, token: null, executionId: null, claimedAt: null });
    expect(r?.waitingFor).toMatchObject({ kind: "approval", call_id: "c1", tool: "shell", on_deadline: "deny" });
    expect(r?.checkpoint).toEqual({ v: 1, pending: { id: "c1" } });
    const [e] = await t.db.select().from(executions).where(eq(executions.id, id.executionId));
    expect(e?.outcome).toBe("suspended");
    // Not claimable while waiting.
    expect(await claimJob(t.db, id.jobId, "h2", randomUUID())).toBeNull();
    // A second suspend by the same (now stale) identity misses.
    expect((await suspendJob(t.db, id, suspension("c1"))).suspended).toBe(false);
  });

  it("a decision is recorded once, re-queues the job claimable, and reads back; another tenant's job is not found", async () => {
    const id = await running();
    await suspendJob(t.db, id, suspension("c2"));
    expect((await decideApproval(t.db, "w2", id.jobId, "c2", "approve", null)).status).toBe("not_found");
    expect((await decideApproval(t.db, "w1", id.jobId, "nope", "approve", null)).status).toBe("unknown_call");
    expect((await decideApproval(t.db, "w1", randomUUID(), "c2", "approve", null)).status).toBe("not_found");
    const first = await decideApproval(t.db, "w1", id.jobId, "c2", "approve", "ok");
    expect(first).toMatchObject({
      status: "recorded",
      decision: { decision: "approve", note: "ok", decidedBy: "api" },
    });
    expect((await row(id.jobId))?.state).toBe("queued");
    expect((await row(id.jobId))?.waitingFor).toBeNull();
    const again = await decideApproval(t.db, "w1", id.jobId, "c2", "deny", null);
    expect(again).toMatchObject({ status: "existing", decision: { decision: "approve" } });
    expect(await resumeDecision(t.db, id.jobId, "c2")).toMatchObject({ decision: "approve", kind: "approval" });
    // Claimable again, started with a new epoch by another host.
    const token = randomUUID();
    const epoch = await claimJob(t.db, id.jobId, "h2", token);
    expect(epoch).toBe(id.epoch + 1);
    const next = { jobId: id.jobId, host: "h2", epoch: epoch as number, token, executionId: randomUUID() };
    expect(await markStarted(t.db, next)).toBe(true);
    const r = await row(id.jobId);
    expect(r?.state).toBe("running");
    expect(r?.executionId).toBe(next.executionId);
  });

  it("cancel while waiting ends the job at once; a decision afterwards is not_waiting", async () => {
    const id = await running();
    await suspendJob(t.db, id, suspension("c3"));
    expect(await requestCancel(t.db, "w1", id.jobId)).toBe("cancelled");
    expect((await row(id.jobId))?.state).toBe("cancelled");
    expect((await decideApproval(t.db, "w1", id.jobId, "c3", "approve", null)).status).toBe("not_waiting");
  });

  it("a cancel requested while running keeps the run from suspending", async () => {
    const id = await running();
    expect(await requestCancel(t.db, "w1", id.jobId)).toBe("requested");
    expect(await suspendJob(t.db, id, suspension("c4"))).toEqual({ suspended: false, cancelRequested: true });
    expect((await row(id.jobId))?.state).toBe("running");
  });

  it("deadlines: deny re-queues with a recorded denial, fail ends the job approval_expired", async () => {
    const a = await running();
    const b = await running();
    await suspendJob(t.db, a, suspension("d1", { deadlineS: 0.05 }));
    await suspendJob(t.db, b, suspension("d2", { deadlineS: 0.05, onDeadline: "fail" }));
    await new Promise((r) => setTimeout(r, 100));
    const out = await expireWaits(t.db);
    expect(out.requeued.map((r) => r.id)).toContain(a.jobId);
    expect(out.failed).toContain(b.jobId);
    expect((await row(a.jobId))?.state).toBe("queued");
    expect(await row(b.jobId)).toMatchObject({ state: "failed", error: { code: "approval_expired" } });
    expect(await resumeDecision(t.db, a.jobId, "d1")).toMatchObject({ decision: "deny", decidedBy: "deadline" });
    // Idempotent: nothing left to expire.
    const again = await expireWaits(t.db);
    expect([...again.requeued.map((r) => r.id), ...again.failed]).not.toContain(a.jobId);
  });

  it("an answer to ask_user is an input that re-queues the job; input to an approval wait just waits", async () => {
    const id = await running();
    await suspendJob(t.db, id, suspension("q1", { kind: "input", tool: "ask_user", question: "colour?" }));
    const answer = await submitInput(t.db, "w1", id.jobId, "blue", null);
    expect(answer).toMatchObject({ status: "requested", resumed: true });
    expect((await row(id.jobId))?.state).toBe("queued");
    expect(await resumeDecision(t.db, id.jobId, "q1")).toMatchObject({
      decision: "input",
      input: { id: answer?.inputId, content: "blue" },
    });

    const other = await running();
    await suspendJob(t.db, other, suspension("a1"));
    const note = await submitInput(t.db, "w1", other.jobId, "also this", null);
    expect(note).toMatchObject({ status: "requested", resumed: false });
    expect((await row(other.jobId))?.state).toBe("waiting");
    const waits = await t.db.select().from(jobWaits).where(eq(jobWaits.jobId, other.jobId));
    expect(waits.map((w) => w.decision)).toEqual([null]);
  });
});

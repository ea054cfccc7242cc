/**
 * The job journal and the recovery edge against real Postgres (src/db/journal-repo.ts,
 * reapRuns in src/db/reaper-repo.ts): appends are fenced by the execution identity, the reaper
 * re-queues a silent run its agent lets recover (epoch + 1, recoveries + 1, recovery_reason) in
 * the same statement that ends its execution, and the stale owner's writes after that hit zero
 * rows, its journal appends included.
 */
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { appendJournal, executionHistory, markRecovered, readJournal } from "../../src/db/journal-repo";
import { type ExecutionIdentity, heartbeat, setCleanupPending } from "../../src/db/ownership-repo";
import { clearCleanupFences, reapRuns } from "../../src/db/reaper-repo";
import { executions, jobs } from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { claimJob, finishJob, markStarted } from "../../tools/lib/single-row-writes";
import type { TestDb } from "../helpers/db";
import { newJob, postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 4, tenants: ["t1"] });
let t: TestDb;
test.beforeAll(({ testDb }) => {
  t = testDb;
});

async function claimAndStart(jobId: string, host: string): Promise<ExecutionIdentity> {
  const token = randomUUID();
  const epoch = await claimJob(t.db, jobId, host, token);
  expect(epoch).not.toBeNull();
  const id = { jobId, host, epoch: epoch as number, token, executionId: randomUUID() };
  expect(await markStarted(t.db, id)).toBe(true);
  return id;
}

const row = async (id: string) =>
  (await t.db.select().from(jobs).where(eq(jobs.id, id)))[0] as typeof jobs.$inferSelect;

/** An agent version whose definition holds only what the reaper reads (its `recovery`). */
async function agentWith(name: string, recovery: Record<string, unknown>): Promise<void> {
  await t.pool.query("INSERT INTO agents (tenant_id, name) VALUES ('t1', $1)", [name]);
  await t.pool.query(
    "INSERT INTO agent_versions (tenant_id, name, version, definition) VALUES ('t1', $1, 1, $2::jsonb)",
    [name, JSON.stringify({ model: "m", recovery })],
  );
}

const turn = (n: number) => ({
  kind: "turn" as const,
  payload: { turn: n, text: "", calls: [{ id: `c${n}`, name: "x__y", args: {} }] },
});

describe("the job journal", () => {
  it("appends in order under the owner; after a recovery the stale owner's appends and writes hit zero rows", async () => {
    const job = await newJob(t.db);
    const a = await claimAndStart(job, "A");
    expect(
      await appendJournal(t.db, a, [
        turn(1),
        { kind: "call", payload: { call_id: "c1", name: "x__y", sandbox: false } },
      ]),
    ).toBe(true);
    expect(await appendJournal(t.db, a, [{ kind: "result", payload: { call_id: "c1", content: "ok" } }])).toBe(true);

    await sleep(5);
    const reaped = await reapRuns(t.db, 1);
    expect(reaped).toContainEqual(expect.objectContaining({ id: job, state: "recovered", executionId: a.executionId }));
    const requeued = await row(job);
    expect(requeued).toMatchObject({
      state: "queued",
      owner: null,
      executionId: null,
      epoch: a.epoch + 1,
      recoveries: 1,
      recoveryReason: "host_lost",
      finishedAt: null,
      error: null,
    });
    const [lostExecution] = await t.db.select().from(executions).where(eq(executions.id, a.executionId));
    expect(lostExecution?.outcome).toBe("lost");

    // The dead owner wakes up: nothing it writes lands, its journal append included.
    expect(await appendJournal(t.db, a, [turn(2)])).toBe(false);
    expect(await heartbeat(t.db, [a])).toEqual(new Set());
    expect(await finishJob(t.db, a, { state: "completed", output: "late" })).toBe(false);

    // The new execution (a higher epoch again: the claim bumps it) recovers, clearing the reason once.
    const b = await claimAndStart(job, "B");
    expect(b.epoch).toBe(a.epoch + 2);
    expect(await markRecovered(t.db, b, { reason: "host_lost" })).toBe(true);
    expect((await row(job)).recoveryReason).toBeNull();
    expect(await markRecovered(t.db, a, { reason: "host_lost" })).toBe(false);
    expect(await appendJournal(t.db, a, [turn(2)])).toBe(false);
    expect(await appendJournal(t.db, b, [turn(2)])).toBe(true);

    const journal = await readJournal(t.db, job);
    expect(journal.map((r) => [r.seq, r.kind, r.epoch])).toEqual([
      [1, "turn", a.epoch],
      [2, "call", a.epoch],
      [3, "result", a.epoch],
      [4, "recovered", b.epoch],
      [5, "turn", b.epoch],
    ]);
    expect(journal[2]?.payload).toEqual({ call_id: "c1", content: "ok" });
  });

  it("executionHistory: each execution by epoch with its own journal recovered row (or none) and the step it began at", async () => {
    const job = await newJob(t.db);
    const other = await newJob(t.db);
    const a = await claimAndStart(job, "A");
    expect(await appendJournal(t.db, a, [turn(1), { kind: "call", payload: { call_id: "c1", name: "x__y" } }])).toBe(
      true,
    );
    await sleep(5);
    expect(await reapRuns(t.db, 1)).toContainEqual(expect.objectContaining({ id: job, state: "recovered" }));
    // B recovers and dies before its journal row: the reaper hands the job on again.
    const b = await claimAndStart(job, "B");
    await sleep(5);
    expect(await reapRuns(t.db, 1)).toContainEqual(expect.objectContaining({ id: job, state: "recovered" }));
    const c = await claimAndStart(job, "C");
    const payload = {
      reason: "host_lost",
      from_step: 2,
      discarded_turn: false,
      unknown_calls: ["c1"],
      sandbox_reset: false,
    };
    expect(await markRecovered(t.db, c, payload)).toBe(true);
    // Another job's recovered row must not leak into this one's history.
    const o = await claimAndStart(other, "A");
    expect(await markRecovered(t.db, o, { reason: "host_shutdown" })).toBe(true);

    const history = await executionHistory(t.db, job);
    expect(history.map((x) => [x.executionId, x.epoch, x.outcome, x.recovered, x.fromStep])).toEqual([
      [a.executionId, a.epoch, "lost", null, 0],
      [b.executionId, b.epoch, "lost", null, 2],
      [c.executionId, c.epoch, null, payload, 2],
    ]);
    expect(history.every((x) => x.startedAt instanceof Date && !Number.isNaN(x.startedAt.getTime()))).toBe(true);
    expect(await executionHistory(t.db, randomUUID())).toEqual([]);
  });

  it("the dead execution's sandbox fence is cleared by its old execution id once the recovered job no longer runs", async () => {
    const job = await newJob(t.db);
    const a = await claimAndStart(job, "A");
    expect(await setCleanupPending(t.db, a, true)).toBe(true);
    await sleep(5);
    expect(await reapRuns(t.db, 1)).toContainEqual(expect.objectContaining({ id: job, state: "recovered" }));
    const b = await claimAndStart(job, "B");
    // The new execution runs (it may have a sandbox of its own under the same fence): ask again later.
    expect(await clearCleanupFences(t.db, [a.executionId])).toEqual({ cleared: 0, running: [a.executionId] });
    expect(await finishJob(t.db, b, { state: "completed", output: "ok" })).toBe(true);
    expect(await clearCleanupFences(t.db, [a.executionId])).toEqual({ cleared: 1, running: [] });
    expect((await row(job)).cleanupPending).toBe(false);
  });

  it("model text that Postgres cannot store (a NUL) is appended with U+FFFD, not refused", async () => {
    const job = await newJob(t.db);
    const a = await claimAndStart(job, "A");
    expect(await appendJournal(t.db, a, [{ kind: "result", payload: { call_id: "c", content: "a\u0000b" } }])).toBe(
      true,
    );
    expect((await readJournal(t.db, job))[0]?.payload).toEqual({ call_id: "c", content: "a\uFFFDb" });
  });

  it("a silent run is lost instead when its agent says fail, or its recoveries are used up; a late one times out", async () => {
    await agentWith("no-resume", { on_host_loss: "fail", max_recoveries: 3 });
    await agentWith("two-at-most", { on_host_loss: "resume", max_recoveries: 2 });
    const fails = await newJob(t.db, { agentName: "no-resume", agentVersion: 1 });
    const usedUp = await newJob(t.db, { agentName: "two-at-most", agentVersion: 1, recoveries: 2 });
    const oneLeft = await newJob(t.db, { agentName: "two-at-most", agentVersion: 1, recoveries: 1 });
    const defaults = await newJob(t.db, { recoveries: 3 });
    const late = await newJob(t.db, { timeoutMs: 1 });
    await Promise.all([fails, usedUp, oneLeft, defaults, late].map((j) => claimAndStart(j, "A")));
    await sleep(10);
    const reaped = new Map((await reapRuns(t.db, 1)).map((r) => [r.id, r.state]));
    expect([fails, usedUp, oneLeft, defaults, late].map((j) => reaped.get(j))).toEqual([
      "lost",
      "lost",
      "recovered",
      "lost",
      "timed_out",
    ]);
    expect((await row(fails)).error).toMatchObject({ code: "lost" });
    expect((await row(oneLeft)).recoveries).toBe(2);
    // Reaping again changes nothing: every row was decided once.
    expect(await reapRuns(t.db, 1)).toEqual([]);
  });
});

/**
 * Every fencing path of the job row (docs/architecture.md, the invariants), against real
 * Postgres: a write by a stale owner
 * (old epoch, old token, old execution) hits zero rows, and reaping is idempotent. The claim race
 * runs real processes against one database, repeated until real interleavings occur.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { eq, inArray } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { type ExecutionIdentity, finishJobsMany, heartbeat, markStartedMany } from "../../src/db/ownership-repo";
import { reapRuns, releaseStaleClaims } from "../../src/db/reaper-repo";
import { executions, jobs } from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { claimJob, claimJobs, finishJob, markStarted } from "../../tools/lib/single-row-writes";
import type { TestDb } from "../helpers/db";
import { newJob, postgresTest } from "../helpers/postgres-fixture";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const test = postgresTest({ connections: 20, tenants: ["t1"] });
let t: TestDb;

test.beforeAll(({ testDb }) => {
  t = testDb;
});

async function row(id: string) {
  const [r] = await t.db.select().from(jobs).where(eq(jobs.id, id));
  return r as typeof jobs.$inferSelect;
}

async function claimAndStart(jobId: string, host: string): Promise<ExecutionIdentity> {
  const token = randomUUID();
  const epoch = await claimJob(t.db, jobId, host, token);
  expect(epoch).not.toBeNull();
  const id = { jobId, host, epoch: epoch as number, token, executionId: randomUUID() };
  expect(await markStarted(t.db, id)).toBe(true);
  return id;
}

describe("fencing: a stale owner's writes hit zero rows", () => {
  it("a late started CAS after the claim was released and re-claimed loses; the new epoch wins", async () => {
    const job = await newJob(t.db);
    const oldToken = randomUUID();
    expect(await claimJob(t.db, job, "A", oldToken)).toBe(1);
    await sleep(5);
    expect((await releaseStaleClaims(t.db, 1)).map((r) => r.id)).toContain(job);
    const r1 = await row(job);
    expect([r1.owner, r1.claimedAt, r1.token, r1.epoch]).toEqual([null, null, null, 1]);
    // Released but not yet re-claimed: the old claimant still cannot start.
    expect(
      await markStarted(t.db, { jobId: job, host: "A", epoch: 1, token: oldToken, executionId: randomUUID() }),
    ).toBe(false);
    const newToken = randomUUID();
    expect(await claimJob(t.db, job, "B", newToken)).toBe(2);
    expect(
      await markStarted(t.db, { jobId: job, host: "A", epoch: 1, token: oldToken, executionId: randomUUID() }),
    ).toBe(false);
    // Same host name, right epoch, wrong token: still no.
    expect(
      await markStarted(t.db, { jobId: job, host: "B", epoch: 2, token: oldToken, executionId: randomUUID() }),
    ).toBe(false);
    const exec = randomUUID();
    expect(await markStarted(t.db, { jobId: job, host: "B", epoch: 2, token: newToken, executionId: exec })).toBe(true);
    const r2 = await row(job);
    expect([r2.state, r2.owner, r2.epoch, r2.executionId]).toEqual(["running", "B", 2, exec]);
  });

  it("a second claim of a claimed job and a second start of a started job hit zero rows", async () => {
    const job = await newJob(t.db);
    const id = await claimAndStart(job, "A");
    expect(await claimJob(t.db, job, "B", randomUUID())).toBeNull();
    expect(await markStarted(t.db, { ...id, executionId: randomUUID() })).toBe(false);
    expect((await row(job)).executionId).toBe(id.executionId);
  });

  it("late heartbeat, timing and terminal writes from a run declared lost hit zero rows", async () => {
    // Its recoveries used up (the default allows 3): the reaper ends it `lost` (journal-repo.test.ts has the recovered case).
    const job = await newJob(t.db, { recoveries: 3 });
    const id = await claimAndStart(job, "A");
    expect(await heartbeat(t.db, [id])).toEqual(new Set([id.executionId]));
    await sleep(5);
    const reaped = await reapRuns(t.db, 1);
    expect(reaped).toContainEqual(expect.objectContaining({ id: job, state: "lost", executionId: id.executionId }));
    const before = await row(job);
    // Timing facts ride on the heartbeat and the terminal write: a late one carries them nowhere.
    const facts = { prepared_at: performance.now(), first_output_at: performance.now() };
    expect(await heartbeat(t.db, [{ ...id, facts }])).toEqual(new Set());
    expect(await finishJobsMany(t.db, [{ id, outcome: { state: "completed", output: "too late" }, facts }])).toEqual([
      { written: false, cancelLagSeconds: null, facts: null },
    ]);
    expect(await finishJob(t.db, id, { state: "completed", output: "too late" })).toBe(false);
    const after = await row(job);
    expect(after.state).toBe("lost");
    expect(after.output).toBeNull();
    expect(after.preparedAt).toBeNull();
    expect(after.firstOutputAt).toBeNull();
    expect(after.heartbeatAt).toEqual(before.heartbeatAt);
    expect(after.finishedAt).toEqual(before.finishedAt);
  });

  it("writes with a wrong execution id, epoch, token or host hit zero rows while the owner's succeed", async () => {
    const job = await newJob(t.db);
    const id = await claimAndStart(job, "A");
    const forgeries: ExecutionIdentity[] = [
      { ...id, executionId: randomUUID() },
      { ...id, epoch: id.epoch + 1 },
      { ...id, token: randomUUID() },
      { ...id, host: "B" },
    ];
    const facts = { prepared_at: performance.now() };
    for (const f of forgeries) {
      expect((await heartbeat(t.db, [{ ...f, facts }])).size).toBe(0);
      expect((await row(job)).preparedAt).toBeNull();
      expect(await finishJob(t.db, f, { state: "failed", error: { code: "aborted", message: "forged" } })).toBe(false);
      expect((await heartbeat(t.db, [f])).size).toBe(0);
    }
    expect(await heartbeat(t.db, [{ ...id, facts }])).toEqual(new Set([id.executionId]));
    const prepared = (await row(job)).preparedAt;
    expect(prepared).toBeInstanceOf(Date);
    await sleep(5);
    // Written once: a later heartbeat carrying another instant leaves the fact as it was.
    await heartbeat(t.db, [{ ...id, facts: { prepared_at: performance.now() } }]);
    expect((await row(job)).preparedAt).toEqual(prepared);
    expect(await finishJob(t.db, id, { state: "completed", output: "ok" })).toBe(true);
    expect(await finishJob(t.db, id, { state: "completed", output: "again" })).toBe(false);
    const r = await row(job);
    expect([r.state, r.output]).toEqual(["completed", "ok"]);
  });

  it("batched claims and starts check every row's own identity: stale rows in a batch hit nothing", async () => {
    const [a, b, c, d] = await Promise.all([newJob(t.db), newJob(t.db), newJob(t.db), newJob(t.db)]);
    const taken = randomUUID();
    expect(await claimJob(t.db, b as string, "other", taken)).toBe(1);
    const tokens = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    const won = await claimJobs(
      t.db,
      "A",
      [a, b, c, d].map((jobId, i) => ({ jobId: jobId as string, token: tokens[i] as string })),
    );
    expect([...won.keys()].sort()).toEqual([a, c, d].sort());
    expect((await row(b as string)).owner).toBe("other");
    await t.db
      .update(jobs)
      .set({ cancelRequestedAt: new Date() })
      .where(eq(jobs.id, d as string));
    const ids: ExecutionIdentity[] = [
      { jobId: a as string, host: "A", epoch: 1, token: tokens[0] as string, executionId: randomUUID() },
      // b belongs to "other": our token never matched.
      { jobId: b as string, host: "A", epoch: 1, token: tokens[1] as string, executionId: randomUUID() },
      // c with a stale epoch.
      { jobId: c as string, host: "A", epoch: 0, token: tokens[2] as string, executionId: randomUUID() },
      // d was asked to cancel before it started.
      { jobId: d as string, host: "A", epoch: 1, token: tokens[3] as string, executionId: randomUUID() },
    ];
    const started = await markStartedMany(t.db, ids);
    expect([...started]).toEqual([ids[0]?.executionId]);
    expect((await row(a as string)).state).toBe("running");
    for (const j of [b, c, d]) expect((await row(j as string)).state).toBe("queued");
    const execs = await t.db
      .select()
      .from(executions)
      .where(inArray(executions.jobId, [a, b, c, d] as string[]));
    expect(execs.map((e) => e.id)).toEqual([ids[0]?.executionId]);
    // The same batch again: the started job's CAS no longer hits.
    expect((await markStartedMany(t.db, [{ ...(ids[0] as ExecutionIdentity), executionId: randomUUID() }])).size).toBe(
      0,
    );
  });

  it("batched terminal writes check every row's own identity: a stale execution misses alone, the others land with their own outcome", async () => {
    const jobsIn = await Promise.all([newJob(t.db), newJob(t.db), newJob(t.db), newJob(t.db)]);
    const [a, b, c, d] = await Promise.all(jobsIn.map((j) => claimAndStart(j, "A")));
    // c was declared lost meanwhile (its host looked dead); d is finished by a stale epoch.
    await t.db
      .update(jobs)
      .set({ state: "lost", finishedAt: new Date() })
      .where(eq(jobs.id, (c as ExecutionIdentity).jobId));
    const t0 = performance.now();
    const results = await finishJobsMany(t.db, [
      {
        id: a as ExecutionIdentity,
        outcome: { state: "completed", output: "a, with a comma" },
        facts: { prepared_at: t0 },
      },
      {
        id: b as ExecutionIdentity,
        outcome: { state: "failed", error: { code: "aborted", message: "b's own error" }, output: "partial b" },
      },
      { id: c as ExecutionIdentity, outcome: { state: "completed", output: "c too late" } },
      { id: { ...(d as ExecutionIdentity), epoch: 7 }, outcome: { state: "cancelled", output: null } },
    ]);
    expect(results.map((r) => r.written)).toEqual([true, true, false, false]);
    expect(results[0]?.facts?.prepared_at).toBeInstanceOf(Date);
    expect(results[0]?.facts?.finished_at).toBeInstanceOf(Date);
    const [ra, rb, rc, rd] = await Promise.all(jobsIn.map((j) => row(j)));
    expect([ra?.state, ra?.output, ra?.error]).toEqual(["completed", "a, with a comma", null]);
    expect([rb?.state, rb?.output, rb?.error]).toEqual([
      "failed",
      "partial b",
      { code: "aborted", message: "b's own error" },
    ]);
    expect([rc?.state, rc?.output]).toEqual(["lost", null]);
    expect([rd?.state, rd?.output, rd?.finishedAt]).toEqual(["running", null, null]);
    // The fact sent with a is on Postgres' clock, between its start and its terminal write.
    expect(ra?.preparedAt?.getTime()).toBeGreaterThanOrEqual(ra?.executionStartedAt?.getTime() as number);
    expect(ra?.preparedAt?.getTime()).toBeLessThanOrEqual(ra?.finishedAt?.getTime() as number);
    expect(rb?.preparedAt).toBeNull();
    const execs = await t.db.select().from(executions).where(inArray(executions.jobId, jobsIn));
    const outcome = (x: ExecutionIdentity | undefined) => execs.find((e) => e.id === x?.executionId)?.outcome;
    expect([outcome(a), outcome(b), outcome(c), outcome(d)]).toEqual(["completed", "failed", null, null]);
    // d named under another host: each row is fenced by its own identity, host included.
    const forged = await finishJobsMany(t.db, [
      { id: { ...(d as ExecutionIdentity), host: "B" }, outcome: { state: "completed", output: "not B's" } },
    ]);
    expect(forged.map((r) => r.written)).toEqual([false]);
    // The same batch again: nothing written, nothing overwritten; d's real owner still finishes.
    const again = await finishJobsMany(t.db, [
      { id: a as ExecutionIdentity, outcome: { state: "failed", error: { code: "aborted", message: "again" } } },
      { id: d as ExecutionIdentity, outcome: { state: "completed", output: "d" } },
    ]);
    expect(again.map((r) => r.written)).toEqual([false, true]);
    expect((await row(a?.jobId as string)).output).toBe("a, with a comma");
  });

  it("a run past its deadline becomes timed_out, not lost, and is never re-claimable", async () => {
    const job = await newJob(t.db, { timeoutMs: 1 });
    const id = await claimAndStart(job, "A");
    await sleep(10);
    expect(await reapRuns(t.db, 60_000)).toContainEqual(
      expect.objectContaining({ id: job, state: "timed_out", executionId: id.executionId }),
    );
    expect(await claimJob(t.db, job, "B", randomUUID())).toBeNull();
    expect((await row(job)).state).toBe("timed_out");
  });

  it("concurrent reapers reap each run exactly once", async () => {
    const ids = await Promise.all(Array.from({ length: 30 }, () => newJob(t.db)));
    for (const j of ids) await claimAndStart(j, "A");
    await sleep(5);
    const results = await Promise.all([reapRuns(t.db, 1), reapRuns(t.db, 1), reapRuns(t.db, 1), reapRuns(t.db, 1)]);
    const reapedIds = results
      .flat()
      .map((r) => r.id)
      .filter((id) => ids.includes(id));
    expect(reapedIds.sort()).toEqual([...ids].sort());
  });
});

interface Attempt {
  racer: string;
  job: string;
  won: boolean;
  epoch: number | null;
}

/** Starts one racer process; `ready` resolves when it is connected and waiting for `go`. */
function startRacer(env: Record<string, string>): { ready: Promise<void>; go(): void; done: Promise<Attempt[]> } {
  const child = spawn(process.execPath, ["--import", "tsx", "tools/chaos/claim-racer.ts"], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  let markReady: () => void = () => {};
  const ready = new Promise<void>((r) => (markReady = r));
  child.stdout.on("data", (d) => {
    out += d;
    if (out.startsWith("ready\n")) markReady();
  });
  child.stderr.on("data", (d) => (err += d));
  child.stdin.on("error", () => {}); // a racer that died is reported by its exit code
  const done = new Promise<Attempt[]>((resolve, reject) => {
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`racer exited ${code}: ${err}`));
      resolve(
        out
          .split("\n")
          .filter((l) => l && l !== "ready")
          .map((l) => JSON.parse(l) as Attempt),
      );
    });
  });
  // A racer that dies before `ready` fails the round instead of hanging it.
  done.catch(() => markReady());
  return { ready, go: () => child.stdin.end("go\n"), done };
}

describe("claim race between real processes", () => {
  it("gives every job exactly one winner, repeated until real interleavings occur", async () => {
    const RACERS = 4;
    let contested = 0;
    let rounds = 0;
    let totalJobs = 0;
    while (rounds < 6 && (contested < 50 || rounds < 2)) {
      rounds++;
      const ids = await Promise.all(Array.from({ length: 150 }, () => newJob(t.db)));
      totalJobs += ids.length;
      const racers = Array.from({ length: RACERS }, (_, i) =>
        startRacer({ DATABASE_URL: t.url, RACER_ID: `racer-${rounds}-${i}`, JOB_IDS: ids.join(",") }),
      );
      await Promise.all(racers.map((r) => r.ready));
      for (const r of racers) r.go();
      const results = (await Promise.all(racers.map((r) => r.done))).flat();
      expect(results).toHaveLength(ids.length * RACERS);
      const rows = await t.db
        .select({ id: jobs.id, owner: jobs.owner, epoch: jobs.epoch })
        .from(jobs)
        .where(inArray(jobs.id, ids));
      const byId = new Map(rows.map((r) => [r.id, r]));
      for (const job of ids) {
        const winners = results.filter((r) => r.job === job && r.won);
        expect(winners, `job ${job}`).toHaveLength(1);
        expect(winners[0]?.epoch).toBe(1);
        expect(byId.get(job)?.owner).toBe(winners[0]?.racer);
        expect(byId.get(job)?.epoch).toBe(1);
      }
      // A job whose winner was not the first racer to reach it in the others' orders shows
      // the racers really overlapped; count jobs claimed by someone other than racer 0.
      contested += new Set(results.filter((r) => r.won && !r.racer.endsWith("-0")).map((r) => r.job)).size;
    }
    console.log(
      `[claim race] ${rounds} rounds, ${totalJobs} jobs, ${RACERS} processes, ${contested} jobs won away from racer 0`,
    );
    expect(contested).toBeGreaterThan(0);
  }, 120_000);
});

/**
 * Ingest trusts ownership, not just the shared secret: every request here carries a valid
 * INTERNAL_SIGNING_SECRET signature (the forger holds the secret), and what decides whether a
 * batch is written is its mac under the execution's claim-token key and what Postgres (here the
 * fake in helpers.ts) says about the execution and the job row. Also: job ids that name no job
 * leave no object state behind, the previous secret is accepted during a rotation, and the
 * projector shows every lifecycle fact Postgres holds.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { INTERNAL_HEADERS, type IngestBatch } from "../../../../src/contracts/events";
import { signRequest } from "../../../../src/domain/signing";
import type { JobEventsObject } from "../../../../workers/durable-objects/job-events/job-events-object";
import {
  type ExecutionHistoryEntry,
  PROJECTED_RECOVERED_SEQ,
} from "../../../../workers/durable-objects/job-events/postgres-facts";
import {
  batch,
  envelope,
  fakeRow,
  gateway,
  type HostBatch,
  jobStub,
  macOf,
  newJob,
  offsets,
  SseReader,
  setJobRow,
  signBatch,
  startExecution,
  testEnv,
  useFakePostgres,
} from "../../helpers";

const URL_ = "http://gateway.test/internal/events";
const PATH = "/internal/events";
const PREVIOUS_SECRET = (testEnv as unknown as { INTERNAL_SIGNING_SECRET_PREVIOUS: string })
  .INTERNAL_SIGNING_SECRET_PREVIOUS;

type Result = {
  job_id: string;
  status: number;
  ack?: { acked_seq: number };
  error?: { code: string; message: string };
};

/** POST one request of `batches` (already carrying their macs), signed with `secret` and `nonce`. */
async function post(batches: IngestBatch[], nonce: string, secret = testEnv.INTERNAL_SIGNING_SECRET) {
  const body = JSON.stringify({ batches });
  const signed = await signRequest(secret, "POST", PATH, body, Date.now(), nonce);
  const res = await gateway.fetch(URL_, {
    method: "POST",
    body,
    headers: {
      "content-type": "application/json",
      [INTERNAL_HEADERS.timestamp]: signed.timestamp,
      [INTERNAL_HEADERS.nonce]: signed.nonce,
      [INTERNAL_HEADERS.signature]: signed.signature,
    },
  });
  return res;
}

/** A real host's request: its batch signed with its own execution's token. */
async function hostSends(b: HostBatch, secret?: string): Promise<Result> {
  await useFakePostgres(jobStub(b.job_id), b.job_id);
  const nonce = crypto.randomUUID();
  const res = await post([await signBatch(b, nonce)], nonce, secret);
  expect(res.status).toBe(200);
  return ((await res.json()) as { results: Result[] }).results[0] as Result;
}

/** A forger's request: the shared secret is valid, the mac is made with `token` (not the execution's). */
async function forgerSends(b: HostBatch, token: string): Promise<Result> {
  const nonce = crypto.randomUUID();
  const first = b.events[0] as { execution_id: string };
  const mac = await macOf(token, first.execution_id, nonce, b.job_id, JSON.stringify(b.events));
  const res = await post([{ ...b, mac }], nonce);
  expect(res.status).toBe(200);
  return ((await res.json()) as { results: Result[] }).results[0] as Result;
}

/** What the object stored: meta rows, generations, events, and its alarm. */
async function storedState(stub: DurableObjectStub<JobEventsObject>) {
  return runInDurableObject(stub, async (_i, state) => {
    const count = (table: string) => {
      const exists = state.storage.sql
        .exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", table)
        .toArray().length;
      return exists ? Number(state.storage.sql.exec(`SELECT count(*) AS n FROM ${table}`).one().n) : 0;
    };
    return {
      meta: count("meta"),
      generations: count("generations"),
      events: count("events"),
      nonces: count("nonces"),
      alarm: await state.storage.getAlarm(),
    };
  });
}

const NOTHING = { meta: 0, generations: 0, events: 0, nonces: 0, alarm: null };

describe("ingest trusts ownership", () => {
  it("refuses a forged model.delta at epoch 1000000; the real host's later deltas are still accepted", async () => {
    const { jobId, stub } = newJob();
    const exec = crypto.randomUUID();
    expect((await hostSends(batch(jobId, exec, 1, [1, 2]))).status).toBe(200);

    const forged = await forgerSends(
      { job_id: jobId, events: [envelope(jobId, crypto.randomUUID(), 1_000_000, 1, "model.delta", { text: "pwned" })] },
      crypto.randomUUID(),
    );
    expect(forged.status).toBe(403);
    expect(forged.error?.code).toBe("forbidden");

    const later = await hostSends(batch(jobId, exec, 1, [3]));
    expect(later).toMatchObject({ status: 200, ack: { acked_seq: 3 } });
    expect((await offsets(stub)).map((e) => [e.execution_id, e.seq])).toEqual([
      [exec, 1],
      [exec, 2],
      [exec, 3],
    ]);
  });

  it("refuses a batch of the running execution whose mac was made with another host's token", async () => {
    const { jobId, stub } = newJob();
    const exec = crypto.randomUUID();
    expect((await hostSends(batch(jobId, exec, 1, [1]))).status).toBe(200);
    // Another job's execution, on another host: its token is real, just not this execution's.
    const other = newJob();
    const otherToken = startExecution(other.jobId, crypto.randomUUID(), 1);
    const forged = await forgerSends(batch(jobId, exec, 1, [2]), otherToken);
    expect(forged.status).toBe(403);
    expect(forged.error?.message).toMatch(/^bad_mac: /);
    // The right execution and epoch but a random token: the same.
    expect((await forgerSends(batch(jobId, exec, 1, [2]), crypto.randomUUID())).status).toBe(403);
    expect((await offsets(stub)).map((e) => e.seq)).toEqual([1]);
  });

  it("refuses a forged run.completed; the stream's terminal event is the row's", async () => {
    const { jobId, stub } = newJob();
    const exec = crypto.randomUUID();
    expect((await hostSends(batch(jobId, exec, 1, [1]))).status).toBe(200);
    const sse = new SseReader(await stub.fetch(`https://job-events/events?after=0&job_id=${jobId}`));

    const forged = await forgerSends(
      { job_id: jobId, events: [envelope(jobId, exec, 1, 2, "run.completed", { output: "FORGED OUTPUT" })] },
      crypto.randomUUID(),
    );
    expect(forged.status).toBe(403);

    const done = await hostSends({
      job_id: jobId,
      events: [envelope(jobId, exec, 1, 2, "run.completed", { output: "the real output" })],
    });
    expect(done.status).toBe(200);
    const events = await sse.rest();
    expect(events.map((e) => [e.event, e.data.payload])).toEqual([
      ["model.delta", { text: "t1" }],
      ["run.completed", { output: "the real output" }],
    ]);
  });

  it("refuses a terminal event that disagrees with the job row, even under the execution's own key", async () => {
    const { jobId, stub } = newJob();
    const exec = crypto.randomUUID();
    const started = { job_id: jobId, events: [envelope(jobId, exec, 1, 1, "run.started", { host: "h" })] };
    expect((await hostSends(started)).status).toBe(200);
    const running = {
      state: "running" as const,
      executionId: exec,
      epoch: 1,
      output: null,
      error: null,
      finishedAt: null,
      startedAt: new Date(),
    };
    await setJobRow(stub, jobId, running);
    const early = await hostSends({
      job_id: jobId,
      events: [envelope(jobId, exec, 1, 2, "run.completed", { output: "not in Postgres" })],
    });
    expect(early.status).toBe(409);
    expect(early.error?.message).toMatch(/^terminal_disagrees: /);

    // The row completed with another output: the host's claim is still refused...
    await setJobRow(stub, jobId, { ...running, state: "completed", output: "row output", finishedAt: new Date() });
    const wrong = await hostSends({
      job_id: jobId,
      events: [envelope(jobId, exec, 1, 2, "run.completed", { output: "not in Postgres" })],
    });
    expect(wrong.status).toBe(409);
    expect((await offsets(stub)).map((e) => e.type)).toEqual(["run.started"]);
    // ...and once the row is past the host's grace, the projector writes the row's terminal event.
    await setJobRow(stub, jobId, {
      ...running,
      state: "completed",
      output: "row output",
      finishedAt: new Date(Date.now() - 60_000),
    });
    await runInDurableObject(stub, (i: JobEventsObject) => {
      i.terminal.liveHostQuietMs = 0;
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const log = (await stub.readAfter(0)) as Array<{ type: string; event: { payload: Record<string, unknown> } }>;
    expect(log.map((e) => [e.type, e.event.payload.output])).toEqual([
      ["run.started", undefined],
      ["run.completed", "row output"],
    ]);
  });

  it("answers a job_id that is not a UUID with 400 and names no object", async () => {
    const stub = jobStub("ZZZ");
    const nonce = crypto.randomUUID();
    const exec = crypto.randomUUID();
    const b = batch("ZZZ", exec, 1, [1]);
    const mac = await macOf(crypto.randomUUID(), exec, nonce, "ZZZ", JSON.stringify(b.events));
    const res = await post([{ ...b, mac }], nonce);
    expect(res.status).toBe(200);
    const [result] = ((await res.json()) as { results: Result[] }).results;
    expect(result).toMatchObject({ status: 400, error: { code: "invalid_request" } });
    // The single-job body too.
    const single = JSON.stringify({ ...b, mac });
    const signed = await signRequest(testEnv.INTERNAL_SIGNING_SECRET, "POST", PATH, single);
    const res2 = await gateway.fetch(URL_, {
      method: "POST",
      body: single,
      headers: {
        "content-type": "application/json",
        [INTERNAL_HEADERS.timestamp]: signed.timestamp,
        [INTERNAL_HEADERS.nonce]: signed.nonce,
        [INTERNAL_HEADERS.signature]: signed.signature,
      },
    });
    expect(res2.status).toBe(400);
    expect(await storedState(stub)).toEqual(NOTHING);
  });

  it("a UUID that is no job stores nothing and sets no alarm", async () => {
    const { jobId, stub } = newJob();
    await useFakePostgres(stub, jobId); // the fake Postgres has no such job
    const result = await forgerSends(batch(jobId, crypto.randomUUID(), 1, [1]), crypto.randomUUID());
    expect(result.status).toBe(403);
    expect(result.error?.message).toMatch(/^unknown_execution: /);
    expect(await storedState(stub)).toEqual(NOTHING);
  });

  it("answers 503 for the batch when Postgres cannot be asked, and writes nothing", async () => {
    // No fake: the object asks the real (unreachable) database of the test env.
    const { jobId, stub } = newJob();
    const result = await forgerSends(batch(jobId, crypto.randomUUID(), 1, [1]), crypto.randomUUID());
    expect(result).toMatchObject({ status: 503, error: { code: "dependency_unavailable" } });
    expect(await storedState(stub)).toEqual(NOTHING);
  });

  it("reads Postgres once per generation: later batches of a verified execution cost no read", async () => {
    const { jobId, stub } = newJob();
    const exec = crypto.randomUUID();
    let reads = 0;
    await useFakePostgres(stub, jobId);
    await runInDurableObject(stub, (i: JobEventsObject) => {
      const inner = i.trust.lookup;
      i.trust.lookup = async (j, e) => {
        reads++;
        return inner(j, e);
      };
    });
    for (let s = 1; s <= 5; s++) expect((await hostSends(batch(jobId, exec, 1, [s]))).status).toBe(200);
    expect(reads).toBe(1);
    // A wrong epoch for the verified execution is refused from the cache.
    const wrongEpoch = await hostSends(batch(jobId, exec, 2, [6]));
    expect(wrongEpoch.status).toBe(403);
    expect(reads).toBe(1);
  });

  it("accepts a request signed with INTERNAL_SIGNING_SECRET_PREVIOUS (rotation); a wrong secret is 401", async () => {
    expect(PREVIOUS_SECRET).toBeTruthy();
    const { jobId, stub } = newJob();
    const exec = crypto.randomUUID();
    expect((await hostSends(batch(jobId, exec, 1, [1]), PREVIOUS_SECRET)).status).toBe(200);
    expect((await hostSends(batch(jobId, exec, 1, [2]))).status).toBe(200);
    const nonce = crypto.randomUUID();
    const wrong = await post([await signBatch(batch(jobId, exec, 1, [3]), nonce)], nonce, "another-secret-0123456789");
    expect(wrong.status).toBe(401);
    expect((await offsets(stub)).map((e) => e.seq)).toEqual([1, 2]);
  });
});

describe("the stream shows every lifecycle fact Postgres holds", () => {
  it("a host that died right after its started CAS: the projector writes run.started, then run.lost", async () => {
    const { jobId, stub } = newJob();
    const exec = crypto.randomUUID();
    const sse = new SseReader(await stub.fetch(`https://job-events/events?after=0&job_id=${jobId}`));
    await setJobRow(stub, jobId, {
      state: "lost",
      executionId: exec,
      epoch: 3,
      output: null,
      error: { code: "lost", message: "the host stopped heartbeating" },
      finishedAt: new Date(),
      startedAt: new Date(Date.now() - 30_000),
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const events = await sse.rest();
    expect(events.map((e) => [e.id, e.event, e.data.execution_id, e.data.epoch, e.data.payload.source])).toEqual([
      [1, "run.started", exec, 3, "projector"],
      [2, "run.lost", exec, 3, "projector"],
    ]);
  });

  it("does not repeat run.started when the host delivered its own", async () => {
    const { jobId, stub } = newJob();
    const exec = crypto.randomUUID();
    await hostSends({ job_id: jobId, events: [envelope(jobId, exec, 1, 1, "run.started", { host: "h" })] });
    await setJobRow(stub, jobId, {
      state: "lost",
      executionId: exec,
      epoch: 1,
      output: null,
      error: { code: "lost", message: "x" },
      finishedAt: new Date(),
      startedAt: new Date(),
    });
    await runInDurableObject(stub, (i: JobEventsObject) => {
      i.terminal.liveHostQuietMs = 0;
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await offsets(stub)).map((e) => [e.type, e.seq])).toEqual([
      ["run.started", 1],
      ["run.lost", Number.MAX_SAFE_INTEGER],
    ]);
  });

  describe("recoveries whose execution delivered nothing", () => {
    const RECOVERED_ROW = {
      reason: "host_lost",
      from_step: 2,
      discarded_turn: true,
      unknown_calls: ["c1"],
      sandbox_reset: false,
    };
    const at = (ms: number) => new Date(Date.now() - ms);
    const entry = (
      executionId: string,
      epoch: number,
      outcome: string | null,
      recovered: Record<string, unknown> | null = null,
    ): ExecutionHistoryEntry => ({
      executionId,
      epoch,
      startedAt: at(60_000 - epoch * 1000),
      outcome,
      recovered,
      fromStep: 2,
    });
    const recoveredEvent = (jobId: string, exec: string, epoch: number) =>
      envelope(jobId, exec, epoch, 1, "run.recovered", { ...RECOVERED_ROW, reason: "host_lost" });
    const quiet = (stub: DurableObjectStub<JobEventsObject>) =>
      runInDurableObject(stub, (i: JobEventsObject) => {
        i.terminal.liveHostQuietMs = 0;
      });

    it("a recovering host SIGKILLed before its outbox sent anything: its run.recovered is projected ahead of the next execution's first batch, once; its late events stay refused", async () => {
      const { jobId, stub } = newJob();
      const [e1, e2, e3] = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
      await hostSends({
        job_id: jobId,
        events: [
          envelope(jobId, e1, 1, 1, "run.started", {}),
          envelope(jobId, e1, 1, 2, "model.delta", { text: "he" }),
        ],
      });
      // e1 lost → re-queued → e2 (epoch 3) started and died at once → re-queued → e3 (epoch 5).
      const row = fakeRow(jobId);
      row.history = [entry(e1, 1, "lost"), entry(e2, 3, "lost"), entry(e3, 5, null, RECOVERED_ROW)];
      startExecution(jobId, e2, 3);
      const sse = new SseReader(await stub.fetch(`https://job-events/events?after=0&job_id=${jobId}`));
      await sse.take(2);
      expect(
        await hostSends({
          job_id: jobId,
          events: [recoveredEvent(jobId, e3, 5), envelope(jobId, e3, 5, 2, "model.delta", { text: "hello" })],
        }),
      ).toMatchObject({ status: 200, ack: { acked_seq: 2 } });
      expect(row.historyReads).toBe(1);
      const live = await sse.take(3);
      expect(live.map((e) => [e.id, e.event, e.data.execution_id, e.data.seq, e.data.payload.source])).toEqual([
        [3, "run.recovered", e2, PROJECTED_RECOVERED_SEQ, "projector"],
        [4, "run.recovered", e3, 1, undefined],
        [5, "model.delta", e3, 2, undefined],
      ]);
      // What Postgres knows of an execution that never wrote its journal row: reason and step.
      expect(live[0]?.data.payload).toEqual({ source: "projector", reason: "host_lost", from_step: 2 });
      // The dead execution's late events: refused by the epoch fence, as before.
      expect(await hostSends({ job_id: jobId, events: [recoveredEvent(jobId, e2, 3)] })).toMatchObject({ status: 409 });
      // Later batches of e3 cost no history read and project nothing again.
      await hostSends({ job_id: jobId, events: [envelope(jobId, e3, 5, 3, "model.delta", { text: "!" })] });
      expect(row.historyReads).toBe(1);
      expect((await offsets(stub)).map((e) => e.type)).toEqual([
        "run.started",
        "model.delta",
        "run.recovered",
        "run.recovered",
        "model.delta",
        "model.delta",
      ]);
      await sse.cancel();
    });

    it("a recovering execution that could not read its row sends no first event: its own run.recovered is projected ahead of its batch", async () => {
      const { jobId, stub } = newJob();
      const [e1, e2] = [crypto.randomUUID(), crypto.randomUUID()];
      await hostSends({ job_id: jobId, events: [envelope(jobId, e1, 1, 1, "run.started", {})] });
      // e1 lost → re-queued → e2 (epoch 3) could not read the job row (agent-loop.ts readRow) and
      // sends only what it can: here a delta-less failure, the first event it has.
      const row = await setJobRow(stub, jobId, {
        state: "failed",
        executionId: e2,
        epoch: 3,
        output: null,
        error: { code: "internal_error", message: "x" },
        finishedAt: at(1000),
        startedAt: at(2000),
      });
      row.history = [entry(e1, 1, "lost"), entry(e2, 3, "failed")];
      startExecution(jobId, e2, 3);
      const sent = await hostSends({
        job_id: jobId,
        events: [envelope(jobId, e2, 3, 1, "run.failed", { error: { code: "internal_error", message: "x" } })],
      });
      expect(sent).toMatchObject({ status: 200 });
      const events = await offsets(stub);
      expect(events.map((e) => [e.type, e.execution_id, e.payload.source])).toEqual([
        ["run.started", e1, undefined],
        ["run.recovered", e2, "projector"],
        ["run.failed", e2, undefined],
      ]);
    });

    it("a completion only Postgres knows, of a recovery whose deltas never arrived: run.recovered (the journal row's payload), then run.completed with the output; the deltas after it rebuild nothing, not a wrong answer", async () => {
      const { jobId, stub } = newJob();
      const [e1, e2] = [crypto.randomUUID(), crypto.randomUUID()];
      await hostSends({
        job_id: jobId,
        events: [
          envelope(jobId, e1, 1, 1, "run.started", {}),
          envelope(jobId, e1, 1, 2, "model.delta", { text: "the ans" }),
        ],
      });
      const row = await setJobRow(stub, jobId, {
        state: "completed",
        executionId: e2,
        epoch: 3,
        output: "the answer",
        error: null,
        finishedAt: at(60_000),
        startedAt: at(70_000),
      });
      row.history = [entry(e1, 1, "lost"), entry(e2, 3, "completed", RECOVERED_ROW)];
      startExecution(jobId, e2, 3);
      await quiet(stub);
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      const events = await offsets(stub);
      expect(events.map((e) => [e.type, e.execution_id, e.payload.source])).toEqual([
        ["run.started", e1, undefined],
        ["model.delta", e1, undefined],
        ["run.recovered", e2, "projector"],
        ["run.completed", e2, "projector"],
      ]);
      expect(events[2]?.payload).toEqual({ ...RECOVERED_ROW, source: "projector" });
      expect(events[3]?.payload).toEqual({ source: "projector", output: "the answer" });
      // A client rebuilding from the deltas after the last run.recovered has "", and the terminal
      // event carries the output: never "the ans" taken for the answer.
      const last = events.map((e) => e.type).lastIndexOf("run.recovered");
      const rebuilt = events
        .slice(last + 1)
        .filter((e) => e.type === "model.delta")
        .map((e) => e.payload.text)
        .join("");
      expect(rebuilt).toBe("");
      // The dead execution's own events, arriving late: the job is finished.
      const late = await hostSends({ job_id: jobId, events: [recoveredEvent(jobId, e2, 3)] });
      expect(late.status).toBe(409);
      expect((await offsets(stub)).length).toBe(4);
    });

    it("the host's own run.recovered arrived first: the projected end adds none", async () => {
      const { jobId, stub } = newJob();
      const [e1, e2] = [crypto.randomUUID(), crypto.randomUUID()];
      await hostSends({ job_id: jobId, events: [envelope(jobId, e1, 1, 1, "run.started", {})] });
      const row = fakeRow(jobId);
      row.history = [entry(e1, 1, "lost"), entry(e2, 3, null, RECOVERED_ROW)];
      await hostSends({ job_id: jobId, events: [recoveredEvent(jobId, e2, 3)] });
      await setJobRow(stub, jobId, {
        state: "lost",
        executionId: e2,
        epoch: 3,
        output: null,
        error: { code: "lost", message: "the host stopped heartbeating" },
        finishedAt: new Date(),
        startedAt: at(10_000),
      });
      await quiet(stub);
      expect(await runDurableObjectAlarm(stub)).toBe(true);
      expect((await offsets(stub)).map((e) => [e.type, e.execution_id, e.seq])).toEqual([
        ["run.started", e1, 1],
        ["run.recovered", e2, 1],
        ["run.lost", e2, Number.MAX_SAFE_INTEGER],
      ]);
    });

    it("a failed history read refuses the new generation's batch (the host resends); the resend lands after the projection", async () => {
      const { jobId, stub } = newJob();
      const [e1, e2] = [crypto.randomUUID(), crypto.randomUUID()];
      const row = fakeRow(jobId);
      row.history = new Error("postgres down");
      // e1 never delivered anything: the first execution of the job, lost at once.
      expect(await hostSends({ job_id: jobId, events: [recoveredEvent(jobId, e2, 3)] })).toMatchObject({
        status: 503,
      });
      expect(await offsets(stub)).toEqual([]);
      row.history = [entry(e1, 1, "lost"), entry(e2, 3, null, RECOVERED_ROW)];
      expect(await hostSends({ job_id: jobId, events: [recoveredEvent(jobId, e2, 3)] })).toMatchObject({
        status: 200,
      });
      expect((await offsets(stub)).map((e) => [e.type, e.execution_id, e.payload.source])).toEqual([
        ["run.started", e1, "projector"],
        ["run.recovered", e2, undefined],
      ]);
    });
  });
});

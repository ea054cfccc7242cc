/**
 * The host's group-committed terminal write (sandbox-host/runner/finish-batcher.ts) against real
 * Postgres: runs that end together share one statement, each still gets its own fenced answer,
 * and a host that dies after the batch committed but before it read the answer leaves every job
 * terminal with its own outcome, which nothing (reaper, a retry) overwrites.
 */
import { randomUUID } from "node:crypto";
import { connect, createServer, type Server, type Socket } from "node:net";
import { eq, inArray } from "drizzle-orm";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { FinishBatcher } from "../../sandbox-host/runner/finish-batcher";
import { type ExecutionIdentity, finishJobsMany } from "../../src/db/ownership-repo";
import { reapRuns } from "../../src/db/reaper-repo";
import * as schema from "../../src/db/schema";
import { executions, jobs } from "../../src/db/schema";
import { sleep } from "../../src/domain/async";
import { claimJob, markStarted } from "../../tools/lib/single-row-writes";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 8, tenants: ["t1"] });
let t: TestDb;

test.beforeAll(async ({ testDb }) => {
  t = testDb;
  // Count terminal-write statements: each one closes its executions rows in one UPDATE.
  await t.pool.query(`
    CREATE TABLE execution_update_statements (at timestamptz DEFAULT clock_timestamp());
    CREATE FUNCTION count_execution_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO execution_update_statements DEFAULT VALUES; RETURN NULL; END $$;
    CREATE TRIGGER count_execution_update AFTER UPDATE ON executions
      FOR EACH STATEMENT EXECUTE FUNCTION count_execution_update();`);
}, 60_000);

async function started(host: string): Promise<ExecutionIdentity> {
  const jobId = randomUUID();
  await t.db.insert(jobs).values({ id: jobId, tenantId: "t1", input: { messages: [] } });
  const token = randomUUID();
  const epoch = await claimJob(t.db, jobId, host, token);
  const id = { jobId, host, epoch: epoch as number, token, executionId: randomUUID() };
  expect(await markStarted(t.db, id)).toBe(true);
  return id;
}

const statements = async () =>
  Number((await t.pool.query("SELECT count(*) AS n FROM execution_update_statements")).rows[0].n);

describe("FinishBatcher", () => {
  it("runs that end in the same tick share one statement; each gets its own fenced answer", async () => {
    const ids = await Promise.all(Array.from({ length: 6 }, () => started("A")));
    // The fourth was declared lost before its terminal write.
    await t.db
      .update(jobs)
      .set({ state: "lost" })
      .where(eq(jobs.id, ids[3]?.jobId as string));
    const before = await statements();
    const batcher = new FinishBatcher(t.db);
    const results = await Promise.all(
      ids.map((id, i) =>
        batcher.finish({ id, outcome: { state: "completed", output: `out ${i}` }, eventsThrough: 10 + i }),
      ),
    );
    expect(await statements()).toBe(before + 1);
    // Each execution keeps the seq its host had emitted through (the projector's backlog check).
    const through = await t.db
      .select({ id: executions.id, eventsThrough: executions.eventsThrough })
      .from(executions)
      .where(
        inArray(
          executions.id,
          ids.map((i) => i.executionId),
        ),
      );
    expect(ids.map((id) => through.find((x) => x.id === id.executionId)?.eventsThrough)).toEqual([
      10,
      11,
      12,
      null,
      14,
      15,
    ]);
    expect(results.map((r) => r.written)).toEqual([true, true, true, false, true, true]);
    const rows = await t.db
      .select()
      .from(jobs)
      .where(
        inArray(
          jobs.id,
          ids.map((i) => i.jobId),
        ),
      );
    for (const [i, id] of ids.entries()) {
      const r = rows.find((x) => x.id === id.jobId);
      expect([r?.state, r?.output]).toEqual(i === 3 ? ["lost", null] : ["completed", `out ${i}`]);
    }
    // A lone finish still goes out at once, in its own statement.
    const lone = await started("A");
    expect((await batcher.finish({ id: lone, outcome: { state: "completed", output: "lone" } })).written).toBe(true);
    expect(await statements()).toBe(before + 2);
  });

  it("a finish queued while a statement is in flight goes in the next statement, not lost", async () => {
    const [a, b, c] = await Promise.all([started("A"), started("A"), started("A")]);
    const batcher = new FinishBatcher(t.db);
    const first = batcher.finish({ id: a as ExecutionIdentity, outcome: { state: "completed", output: "a" } });
    await sleep(0); // a's statement is on the wire now
    const later = [b, c].map((id) =>
      batcher.finish({ id: id as ExecutionIdentity, outcome: { state: "completed", output: "late" } }),
    );
    expect((await Promise.all([first, ...later])).map((r) => r.written)).toEqual([true, true, true]);
  });

  it("host dies after the batch committed, before the answer: every job keeps its own outcome; reaper and retry change nothing", async () => {
    const ids = await Promise.all(Array.from({ length: 4 }, () => started("A")));
    // The host's Postgres connection runs through a proxy that, once armed, holds every answer.
    const target = new URL(t.url);
    let armed = false;
    const clients: Socket[] = [];
    const proxy: Server = createServer((client) => {
      clients.push(client);
      const server = connect(Number(target.port), target.hostname);
      client.on("data", (b) => server.write(b));
      server.on("data", (b) => {
        if (!armed) client.write(b);
      });
      client.on("error", () => {});
      server.on("error", () => {});
      client.on("close", () => server.destroy());
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    const port = (proxy.address() as { port: number }).port;
    const url = new URL(t.url);
    url.host = `127.0.0.1:${port}`;
    const hostPool = new pg.Pool({ connectionString: url.toString(), max: 1 });
    hostPool.on("error", () => {});
    try {
      await hostPool.query("SELECT 1");
      armed = true;
      const batcher = new FinishBatcher(drizzle(hostPool, { schema }));
      const outcomes = ids.map((id, i) =>
        batcher.finish({ id, outcome: { state: "completed", output: `kept ${i}` } }).then(
          () => "answered",
          () => "rejected",
        ),
      );
      // Committed: another connection sees all four terminal. Then the host dies (socket gone).
      for (let i = 0; ; i++) {
        const n = await t.pool.query("SELECT count(*)::int AS n FROM jobs WHERE id = ANY($1) AND state = 'completed'", [
          ids.map((x) => x.jobId),
        ]);
        if (n.rows[0].n === 4) break;
        if (i > 200) throw new Error("the batch never committed");
        await sleep(10);
      }
      for (const c of clients) c.destroy();
      expect(await Promise.all(outcomes)).toEqual(["rejected", "rejected", "rejected", "rejected"]);
    } finally {
      await hostPool.end().catch(() => {});
      await new Promise((r) => proxy.close(r));
    }
    const check = async () => {
      const rows = await t.db
        .select()
        .from(jobs)
        .where(
          inArray(
            jobs.id,
            ids.map((i) => i.jobId),
          ),
        );
      const execs = await t.db
        .select()
        .from(executions)
        .where(
          inArray(
            executions.jobId,
            ids.map((i) => i.jobId),
          ),
        );
      return ids.map((id) => {
        const r = rows.find((x) => x.id === id.jobId);
        return [r?.state, r?.output, execs.find((e) => e.id === id.executionId)?.outcome];
      });
    };
    const expected = ids.map((_, i) => ["completed", `kept ${i}`, "completed"]);
    expect(await check()).toEqual(expected);
    // The reaper treats them as finished, whatever it would have thought of their heartbeats.
    const reaped = await reapRuns(t.db, 0);
    expect(reaped.filter((r) => ids.some((id) => id.jobId === r.id))).toEqual([]);
    // A replacement that replays the batch (it cannot know it landed) writes nothing.
    const replay = await finishJobsMany(
      t.db,
      ids.map((id) => ({ id, outcome: { state: "failed", error: { code: "aborted", message: "replayed" } } })),
    );
    expect(replay.map((r) => r.written)).toEqual([false, false, false, false]);
    expect(await check()).toEqual(expected);
  });
});

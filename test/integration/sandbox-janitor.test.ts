/**
 * The sandbox janitor converges against a real Docker engine and a real Postgres: a job's
 * cleanup fence is cleared once its sandbox is gone, even when the pass that removed the sandbox
 * could not clear the fence. Once a sandbox is gone no listing finds it again, so a fence the
 * removing pass left set stayed set for ever before (and a fenced job is never purged).
 *
 * The failures are real, not simulated: a network the engine refuses to remove because another
 * container is still attached to it, and a Postgres trigger that rejects the fence clear (of the
 * janitor's pass, or of the owner's own end of run).
 */
import { randomUUID } from "node:crypto";
import { drizzle } from "drizzle-orm/node-postgres";
import { afterAll, describe, expect, it } from "vitest";
import { SandboxJanitor } from "../../sandbox-host/reaper/sandbox-janitor";
import { ActiveRun, Execution, type RunDeps } from "../../sandbox-host/runner/run-context";
import { destroySandbox } from "../../sandbox-host/runner/tool-step";
import type { Docker } from "../../sandbox-host/sandbox/docker";
import { createSandboxManager, type SandboxManager } from "../../sandbox-host/sandbox/manager";
import type { Db } from "../../src/db/client";
import * as schema from "../../src/db/schema";
import type { TestDb } from "../helpers/db";
import { countHostObjects, removeHostObjects, requireDocker, TEST_IMAGE, testHostId } from "../helpers/docker";
import { postgresTest } from "../helpers/postgres-fixture";

const docker = await requireDocker();
// Disjoint from the other sandbox suites' pools (they run at the same time).
const POOL = "10.253.254.0/26";

// File-scoped fixtures are declared at the top level of the file.
const test = postgresTest({ connections: 4, tenants: ["t1"] });

describe.skipIf(!docker)("sandbox janitor: every pass converges on clear fences", () => {
  const d = docker as Docker;
  let t: TestDb;
  let db: Db;
  /** The host that made the sandboxes and died for good. */
  const deadHost = testHostId("janitor-dead");
  /** The live host whose janitor removes them. */
  const liveHost = testHostId("janitor-live");
  let made: SandboxManager;
  let janitor: SandboxJanitor;
  const blockers: string[] = [];

  test.beforeAll(async ({ testDb }) => {
    t = testDb;
    db = drizzle({ client: t.pool, schema }) as unknown as Db;
    made = createSandboxManager({ docker: d, hostId: deadHost, image: TEST_IMAGE, pool: POOL });
    const live = createSandboxManager({ docker: d, hostId: liveHost, image: TEST_IMAGE, pool: POOL });
    janitor = new SandboxJanitor({
      db,
      sandbox: live,
      log: { info() {}, warn() {}, error() {} },
      intervalMs: 60_000,
    });
  }, 120_000);

  afterAll(async () => {
    for (const id of blockers)
      await d
        .getContainer(id)
        .remove({ force: true })
        .catch(() => {});
    await removeHostObjects(d, deadHost);
    await removeHostObjects(d, liveHost);
  }, 60_000);

  /** A job whose run on the dead host is over (`lost`), fenced, with its sandbox on the engine. */
  async function lostRunWithSandbox(): Promise<{ jobId: string; runId: string }> {
    const jobId = randomUUID();
    const runId = randomUUID();
    await t.pool.query(
      `INSERT INTO jobs (id, tenant_id, state, input, owner, epoch, token, execution_id, cleanup_pending, finished_at)
       VALUES ($1, 't1', 'lost', '{"messages":[]}', $3, 1, gen_random_uuid(), $2, true, now())`,
      [jobId, runId, deadHost],
    );
    await t.pool.query(
      `INSERT INTO executions (id, job_id, host, epoch, finished_at, outcome) VALUES ($1, $2, $3, 1, now(), 'lost')`,
      [runId, jobId, deadHost],
    );
    await made.ensure(runId);
    return { jobId, runId };
  }
  const fence = async (jobId: string): Promise<boolean> =>
    (await t.pool.query("select cleanup_pending from jobs where id = $1", [jobId])).rows[0].cleanup_pending;

  /** A plain container attached to the run's sandbox network: the engine refuses to remove that network. */
  async function blockNetworkOf(runId: string) {
    const filters = JSON.stringify({ label: [`ear.sandbox.run=${runId}`] });
    const netName = (await d.listNetworks({ filters }))[0]?.Name as string;
    const blocker = await d.createContainer({
      Image: TEST_IMAGE,
      Cmd: ["/bin/sh", "-c", "sleep 600"],
      HostConfig: { NetworkMode: netName, Init: true },
    });
    blockers.push(blocker.id);
    await blocker.start();
    return blocker;
  }

  it("a pass where one run's removal fails still clears the fence of the run it removed, and the next pass the other", async () => {
    const a = await lostRunWithSandbox();
    const b = await lostRunWithSandbox();
    // Another container on b's network: the engine refuses to remove the network ("active
    // endpoints"), so b's removal fails while a's succeeds in the same pass.
    const blocker = await blockNetworkOf(b.runId);
    let afterFirst: { removed: string[]; a: boolean; b: boolean; objects: object };
    try {
      const removed = await janitor.once();
      afterFirst = {
        removed,
        a: await fence(a.jobId),
        b: await fence(b.jobId),
        objects: await countHostObjects(d, deadHost),
      };
    } finally {
      await blocker.remove({ force: true });
    }
    const removed = await janitor.once();
    // Both sandboxes are gone now, so no later pass will ever list them again: their fences must
    // be clear by now or they never will be.
    expect(await countHostObjects(d, deadHost)).toEqual({ containers: 0, networks: 0 });
    expect({ afterFirst, afterSecond: { removed, a: await fence(a.jobId), b: await fence(b.jobId) } }).toEqual({
      // a is removed and cleared by the first pass; b's network stays (the engine refused) and so does its fence.
      afterFirst: { removed: [a.runId], a: false, b: true, objects: { containers: 0, networks: 1 } },
      afterSecond: { removed: [b.runId], a: false, b: false },
    });
  }, 60_000);

  it("a run whose removal failed while another remover finished it is cleared by the next pass", async () => {
    const e = await lostRunWithSandbox();
    const blocker = await blockNetworkOf(e.runId);
    try {
      expect(await janitor.once()).toEqual([]); // the engine refused e's network
    } finally {
      await blocker.remove({ force: true });
    }
    expect(await fence(e.jobId)).toBe(true);
    // Someone else (another host's janitor on the same engine) removes what was left, so no
    // listing will find e again.
    await removeHostObjects(d, deadHost);
    await janitor.once();
    expect(await fence(e.jobId)).toBe(false);
  }, 60_000);

  /**
   * A real statement failure for every fence clear while it is in place: a trigger raises on it.
   * Returns the function that lifts it.
   */
  async function rejectFenceClears(): Promise<() => Promise<void>> {
    await t.pool.query(`
      CREATE FUNCTION reject_fence_clear() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF OLD.cleanup_pending AND NOT NEW.cleanup_pending THEN
          RAISE EXCEPTION 'injected: fence clear rejected';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER reject_fence_clear BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION reject_fence_clear();`);
    return async () => {
      await t.pool.query(
        "DROP TRIGGER IF EXISTS reject_fence_clear ON jobs; DROP FUNCTION IF EXISTS reject_fence_clear()",
      );
    };
  }

  it("a fence clear that Postgres rejects after the removal is retried by the next pass", async () => {
    const c = await lostRunWithSandbox();
    const lift = await rejectFenceClears();
    try {
      await janitor.once();
      // The sandbox is gone, the clear failed: the fence is still set.
      expect(await countHostObjects(d, deadHost)).toEqual({ containers: 0, networks: 0 });
      expect(await fence(c.jobId)).toBe(true);
    } finally {
      await lift();
    }
    // No sandbox is left for any listing to find; the next pass still clears the fence.
    await janitor.once();
    expect(await fence(c.jobId)).toBe(false);
    expect(janitor.owed()).toEqual([]);
  }, 60_000);

  it("a run that removed its own sandbox but could not clear its fence has it cleared by the janitor", async () => {
    // The owner's end of run (run-job.ts): the terminal state is written, then destroySandbox.
    const { jobId, runId } = await lostRunWithSandbox();
    await t.pool.query("UPDATE jobs SET state = 'completed', error = NULL WHERE id = $1", [jobId]);
    const { epoch, token } = (await t.pool.query("select epoch, token from jobs where id = $1", [jobId])).rows[0];
    const id = { jobId, executionId: runId, host: deadHost, epoch, token };
    const deps = {
      db,
      sandbox: made,
      log: { info() {}, warn() {}, error() {} },
      fenceOwed: (run: string) => janitor.settle([run]),
    } as unknown as RunDeps;
    const lift = await rejectFenceClears();
    try {
      await destroySandbox(new Execution({ deps, run: new ActiveRun(id), emit: () => {} }));
      expect(await countHostObjects(d, deadHost)).toEqual({ containers: 0, networks: 0 });
      expect(await fence(jobId)).toBe(true);
    } finally {
      await lift();
    }
    await janitor.once();
    expect(await fence(jobId)).toBe(false);
  }, 60_000);

  it("a run whose sandbox was removed while the run still counted as running is cleared once it is over", async () => {
    const jobId = randomUUID();
    const runId = randomUUID();
    await t.pool.query(
      `INSERT INTO jobs (id, tenant_id, state, input, owner, epoch, token, execution_id, cleanup_pending, heartbeat_at)
       VALUES ($1, 't1', 'running', '{"messages":[]}', $3, 1, gen_random_uuid(), $2, true, now())`,
      [jobId, runId, deadHost],
    );
    await t.pool.query(`INSERT INTO executions (id, job_id, host, epoch) VALUES ($1, $2, $3, 1)`, [
      runId,
      jobId,
      deadHost,
    ]);
    // What a restarted host does at start: its previous process's sandbox goes before the reaper
    // has declared that run lost, and the janitor is told to settle the run's fence.
    await made.ensure(runId);
    const restarted = createSandboxManager({ docker: d, hostId: deadHost, image: TEST_IMAGE, pool: POOL });
    const { runs } = await restarted.removeOrphans(new Set());
    expect(runs).toEqual([runId]);
    janitor.settle(runs);
    await janitor.once();
    expect(await fence(jobId)).toBe(true); // still running: the fence must stay
    await t.pool.query("UPDATE jobs SET state = 'lost', finished_at = now() WHERE id = $1", [jobId]);
    await janitor.once();
    expect(await fence(jobId)).toBe(false);
    expect(janitor.owed()).toEqual([]);
  }, 60_000);
});

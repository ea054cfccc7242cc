/**
 * The Worker's cron backstop (workers/scheduled.ts) ends jobs with no sandbox-host alive: a stack
 * with zero hosts, jobs left behind by a host that died (a silent run, an overdue run, a claim
 * that never started, a wait past its deadline, re-indexed once re-queued; a queued job past its
 * ttl_s), and the gateway's scheduled handler fired in workerd through Miniflare's trigger route,
 * the way Cloudflare's cron trigger would call it. It also fires schedule ticks, each admitted as
 * a submit is: a tenant whose budget is spent gets no tick's job. While a host sleeps it sweeps
 * nothing, until a submit has poked the sleepers; while a host sleeps over runs held elsewhere
 * (their owner may die with no host awake) it sweeps as ever.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import type { Db } from "../../src/db/client";
import * as schema from "../../src/db/schema";
import { redisKeys } from "../../src/quota/keys";
import { createRedisClient } from "../../src/quota/redis";
import { apiClient, userMessage } from "../helpers/api";
import { claimAsDeadHost, waitAsDeadHost } from "../helpers/dead-host";
import { useStack } from "../helpers/stack";

describe("the cron backstop with zero hosts", () => {
  const t = useStack({ hosts: 0 });

  async function submit(): Promise<string> {
    const r = await apiClient(t.stack.gatewayUrl, t.stack.apiKey).call<{ job: { id: string } }>(
      "POST",
      "/v1/jobs",
      userMessage("left behind"),
    );
    expect(r.status).toBe(202);
    return r.body.job.id;
  }

  async function states(
    ids: string[],
  ): Promise<Record<string, { state: string; owner: string | null; error: unknown }>> {
    const r = await t.pool.query<{ id: string; state: string; owner: string | null; error: unknown }>(
      "SELECT id, state, owner, error FROM jobs WHERE id = ANY($1::uuid[])",
      [ids],
    );
    return Object.fromEntries(r.rows.map((row) => [row.id, { state: row.state, owner: row.owner, error: row.error }]));
  }

  /** A job claimed an hour ago by a host that died before starting it: the reaper backstop's to release. */
  async function staleClaimOfDeadHost(): Promise<string> {
    const id = await submit();
    await claimAsDeadHost(drizzle({ client: t.pool, schema }) as unknown as Db, id, false);
    await t.pool.query("UPDATE jobs SET claimed_at = now() - interval '1 hour' WHERE id = $1", [id]);
    return id;
  }

  const fire = () => fetch(`${t.stack.gatewayUrl}/cdn-cgi/handler/scheduled?cron=${encodeURIComponent("* * * * *")}`);

  it("sends Postgres nothing while a host sleeps, and sweeps again once a submit has poked the sleepers", async () => {
    const staleClaim = await staleClaimOfDeadHost();
    // A host asleep for another minute (sandbox-host/lifecycle/sleep.ts registers this way).
    const redis = createRedisClient(t.stack.upstash);
    const keys = redisKeys();
    await redis.zadd(keys.sleepers(), { score: Date.now() + 60_000, member: "sleeping-host" });
    expect((await fire()).status).toBe(200);
    // The stale claim is the reaper backstop's to release: left alone, the invocation did no sweep.
    const r1 = await t.pool.query<{ owner: string | null }>("SELECT owner FROM jobs WHERE id = $1", [staleClaim]);
    expect(r1.rows[0]?.owner).toBe("dead-host");
    // A submit's ready-index command pokes the sleeper and empties the set: the next invocation sweeps.
    await submit();
    expect(await redis.zcard(keys.sleepers())).toBe(0);
    // Two entries: one for a wait the host gave up on but Redis still holds (fleet-wake.ts), one for its live wait.
    expect(await redis.llen(keys.wake("sleeping-host"))).toBe(2);
    expect((await fire()).status).toBe(200);
    const r2 = await t.pool.query<{ owner: string | null }>("SELECT owner FROM jobs WHERE id = $1", [staleClaim]);
    expect(r2.rows[0]?.owner).toBeNull();
  }, 60_000);

  it("sweeps while a host sleeps over runs held elsewhere", async () => {
    const staleClaim = await staleClaimOfDeadHost();
    // Registered the way sandbox-host/lifecycle/sleep.ts registers a sleep over held runs.
    const redis = createRedisClient(t.stack.upstash);
    const keys = redisKeys();
    const until = Date.now() + 60_000;
    await redis.zadd(keys.sleepers(), { score: until, member: "held-sleeper" });
    await redis.zadd(keys.heldSleepers(), { score: until, member: "held-sleeper" });
    try {
      expect((await fire()).status).toBe(200);
      const r = await t.pool.query<{ owner: string | null }>("SELECT owner FROM jobs WHERE id = $1", [staleClaim]);
      expect(r.rows[0]?.owner).toBeNull();
    } finally {
      await redis.del(keys.sleepers(), keys.heldSleepers());
    }
  }, 60_000);

  it("marks the silent run lost, the overdue run timed_out, releases the stale claim, leaves a live run alone, and a watcher sees run.lost", async () => {
    const db = drizzle({ client: t.pool, schema }) as unknown as Db;
    const [silent, overdue, staleClaim, live] = [await submit(), await submit(), await submit(), await submit()];
    await claimAsDeadHost(db, silent);
    await claimAsDeadHost(db, overdue);
    await claimAsDeadHost(db, staleClaim, false);
    await claimAsDeadHost(db, live);
    // The dead host's last heartbeat was an hour ago; the overdue run is still heartbeating (its
    // host is a zombie that stopped enforcing the deadline) but is past its deadline; the claim
    // never reached `started`; the live run heartbeats now and has no deadline.
    // Its recoveries used up (the default allows 3), so the reaper ends it `lost`, not recovered (recovery.test.ts has those).
    await t.pool.query("UPDATE jobs SET heartbeat_at = now() - interval '1 hour', recoveries = 3 WHERE id = $1", [
      silent,
    ]);
    await t.pool.query("UPDATE jobs SET deadline_at = now() - interval '1 second' WHERE id = $1", [overdue]);
    await t.pool.query("UPDATE jobs SET claimed_at = now() - interval '1 hour' WHERE id = $1", [staleClaim]);

    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    const watched = api.events(silent);
    // Observed below; if an assertion fails first, the stream is cut when the stack stops.
    watched.catch(() => {});
    // No host is alive, so nothing else will ever reap: the rows stay as the dead host left them.
    await new Promise((r) => setTimeout(r, 1500));
    const before = await states([silent, overdue, staleClaim, live]);
    expect([silent, overdue, staleClaim, live].map((id) => before[id]?.state)).toEqual([
      "running",
      "running",
      "queued",
      "running",
    ]);
    expect(before[staleClaim]?.owner).toBe("dead-host");

    // The trigger route answers once the handler has finished: "ok", or "exception" when it threw
    // (or when the Worker has no scheduled handler at all).
    const res = await fire();
    const outcome = { status: res.status, body: await res.text() };

    const after = await states([silent, overdue, staleClaim, live]);
    expect(after[silent]).toMatchObject({ state: "lost", error: { code: "lost" } });
    expect(after[overdue]).toMatchObject({ state: "timed_out", error: { code: "timed_out" } });
    expect(after[staleClaim]).toMatchObject({ state: "queued", owner: null });
    expect(after[live]).toMatchObject({ state: "running", owner: "dead-host" });
    expect(outcome).toEqual({ status: 200, body: "ok" });

    // The watcher's stream ends with the terminal event the JobEvents object projects from the row.
    const events = await watched;
    expect(events.at(-1)?.event).toBe("run.lost");

    // Idempotent: a second firing (or a host's reaper racing it) changes nothing more.
    expect((await fire()).status).toBe(200);
    expect(await states([silent, overdue, staleClaim, live])).toEqual(after);
  }, 60_000);

  it("ends waits past their deadline with no host alive: on_deadline deny re-queues with the denial, fail is approval_expired", async () => {
    const db = drizzle({ client: t.pool, schema }) as unknown as Db;
    const [deny, fail, notYet] = [await submit(), await submit(), await submit()];
    await waitAsDeadHost(db, deny, "deny", 0.01);
    await waitAsDeadHost(db, fail, "fail", 0.01);
    await waitAsDeadHost(db, notYet, "fail", 3600);
    // The submits indexed all three; drop the entries so the index shows what the pass re-indexed.
    const redis = createRedisClient(t.stack.upstash);
    const readyKey = redisKeys().readyIndex();
    await redis.zrem(readyKey, deny, fail, notYet);
    await new Promise((r) => setTimeout(r, 50));
    const res = await fire();
    expect({ status: res.status, body: await res.text() }).toEqual({ status: 200, body: "ok" });
    const after = await states([deny, fail, notYet]);
    expect(after[deny]).toMatchObject({ state: "queued", owner: null });
    expect(after[fail]).toMatchObject({ state: "failed", error: { code: "approval_expired" } });
    expect(after[notYet]).toMatchObject({ state: "waiting" });
    const decided = await t.pool.query("SELECT decision, decided_by FROM job_waits WHERE job_id = $1", [deny]);
    expect(decided.rows).toEqual([{ decision: "deny", decided_by: "deadline" }]);
    // The re-queued job is re-indexed, as a host's reaper would (live hosts find it without a sweep).
    expect(await Promise.all([deny, fail, notYet].map((id) => redis.zscore(readyKey, id)))).toEqual([
      expect.any(Number),
      null,
      null,
    ]);
  }, 60_000);

  it("expires a queued job past its ttl_s with no host alive: expired, never started, a watcher sees run.expired", async () => {
    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    const submitted = await Promise.all(
      [1, 3600].map((ttl_s) =>
        api.call<{ job: { id: string } }>("POST", "/v1/jobs", { ...userMessage("no host"), ttl_s }),
      ),
    );
    expect(submitted.map((r) => r.status)).toEqual([202, 202]);
    const [due, notYet] = submitted.map((r) => r.body.job.id) as [string, string];
    const watched = api.events(due);
    watched.catch(() => {});
    // Past the ttl with nobody to sweep: the claim never takes it, and it stays queued.
    await new Promise((r) => setTimeout(r, 1500));
    expect((await states([due, notYet]))[due]?.state).toBe("queued");

    const res = await fire();
    expect({ status: res.status, body: await res.text() }).toEqual({ status: 200, body: "ok" });
    const after = await states([due, notYet]);
    expect(after[due]).toMatchObject({ state: "expired", owner: null, error: { code: "expired" } });
    expect(after[notYet]).toMatchObject({ state: "queued", owner: null });
    const started = await t.pool.query(
      "SELECT j.started_at, (SELECT count(*)::int FROM executions e WHERE e.job_id = j.id) AS executions FROM jobs j WHERE j.id = $1",
      [due],
    );
    expect(started.rows).toEqual([{ started_at: null, executions: 0 }]);
    const events = await watched;
    expect(events.map((e) => e.event)).not.toContain("run.started");
    expect(events.at(-1)?.event).toBe("run.expired");

    // Idempotent: a second firing changes nothing more.
    expect((await fire()).status).toBe(200);
    expect(await states([due, notYet])).toEqual(after);
  }, 60_000);

  it("purges a finished job past JOB_RETENTION_S with no host alive: afterwards it is 410 gone", async () => {
    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    const [old, recent] = [await submit(), await submit()];
    await t.pool.query("UPDATE jobs SET state = 'cancelled', finished_at = now() - interval '31 days' WHERE id = $1", [
      old,
    ]);
    await t.pool.query("UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE id = $1", [recent]);
    expect((await api.call("GET", `/v1/jobs/${old}`)).status).toBe(200);

    const res = await fire();
    expect({ status: res.status, body: await res.text() }).toEqual({ status: 200, body: "ok" });

    const gone = await api.call<{ error: { code: string } }>("GET", `/v1/jobs/${old}`);
    expect(gone.status).toBe(410);
    expect(gone.body.error.code).toBe("gone");
    expect((await api.call("GET", `/v1/jobs/${recent}`)).status).toBe(200);
  }, 60_000);

  it("fires a schedule's tick with no host alive only when job admission takes it: a spent budget makes no job", async () => {
    await t.pool.query("INSERT INTO tenants (id, name, daily_budget_usd) VALUES ('cron-spent', 'cron-spent', 0)");
    const { rows } = await t.pool.query<{ id: string }>(
      `INSERT INTO schedules (id, tenant_id, cron, input, next_run_at)
       VALUES (gen_random_uuid(), 'cron-spent', '* * * * *', '{"messages":[{"role":"user","content":"x"}]}',
         date_trunc('second', now()) - interval '1 second')
       RETURNING id`,
    );
    const id = rows[0]?.id as string;
    const tick = async () => {
      expect((await fire()).status).toBe(200);
      const r = await t.pool.query<{ jobs: string; next_run_at: Date; last_run_at: Date | null }>(
        `SELECT (SELECT count(*) FROM jobs WHERE schedule_id = s.id) AS jobs, next_run_at, last_run_at
         FROM schedules s WHERE id = $1`,
        [id],
      );
      return r.rows[0] as { jobs: string; next_run_at: Date; last_run_at: Date | null };
    };
    const refused = await tick();
    // Skipped, not stuck: the next tick is owed, no job was made and last_run_at did not move.
    expect({ jobs: Number(refused.jobs), last: refused.last_run_at }).toEqual({ jobs: 0, last: null });
    expect(refused.next_run_at.getTime()).toBeGreaterThan(Date.now() - 1000);

    await t.pool.query("UPDATE tenants SET daily_budget_usd = NULL WHERE id = 'cron-spent'");
    await t.pool.query(
      "UPDATE schedules SET next_run_at = date_trunc('second', now()) - interval '1 second' WHERE id = $1",
      [id],
    );
    expect(Number((await tick()).jobs)).toBe(1);
  }, 60_000);
});

/**
 * One admission for every path that creates a job (src/domain/job-admission.ts, src/db/admission-repo.ts),
 * on the real stack (gateway in workerd, Postgres, Redis, one sandbox-host, the mock model). The
 * operator's default model `premium` is offered to another tenant only. A schedule naming no
 * model is refused at create as POST /v1/jobs, a batch and a chat message are; a schedule row
 * that predates the check fires no job and no model call; a tenant whose daily budget is spent,
 * or whose queue is full, gets no tick's job and no webhook delivery; a delegate call to an agent
 * whose model is closed to the tenant creates no child.
 */
import { randomUUID } from "node:crypto";
import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { JobView } from "../../src/contracts/job";
import { stateRefusal, tenantQueuedSql } from "../../src/db/admission-repo";
import { type Db, resultRows } from "../../src/db/client";
import { fleetWork, reapRuns } from "../../src/db/reaper-repo";
import { fireDueSchedules } from "../../src/db/schedules-repo";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { parseModelRegistry } from "../../src/domain/models";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient, userMessage } from "../helpers/api";
import type { TestDb } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

/** The default, `premium`, is offered to tenant `vip` only; `mock-model` to everyone. */
const REGISTRY = JSON.stringify({
  default: "premium",
  models: [{ name: "premium", tenants: ["vip"] }, { name: "mock-model" }],
});
/** The tenant queued-jobs cap of the gateway and the host (the queue-full tick below fills it). */
const MAX_QUEUED = 20;
const CLOSED_DEFAULT =
  'model (omitted, so the default): "premium" is not offered; must be one of mock-model (GET /v1/models)';

type ErrorBody = { error: { code: string; message: string } };

describe.skipIf(!canRun)("job admission: every path that creates a job checks the same things", () => {
  const hostLines: string[] = [];
  const t = useStack({
    log: (source, line) => {
      if (source === "host") hostLines.push(line);
    },
    hosts: 1,
    modelRegistry: REGISTRY,
    gatewayVars: { MAX_QUEUED_JOBS_PER_TENANT: String(MAX_QUEUED) },
    hostEnv: { MAX_QUEUED_JOBS_PER_TENANT: String(MAX_QUEUED), HOST_SCHEDULE_MS: "250" },
  });
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const db = () => drizzle({ client: t.pool, schema }) as unknown as Db;

  /** A tenant of its own (budget and queue changes stay inside the test), with a client. */
  const tenant = async (id: string) => {
    await createTenant(db(), id);
    return apiClient(t.stack.gatewayUrl, (await createApiKey(db(), id)).key);
  };
  /** A schedule row as one created before the check existed would be: ticking every second from now. */
  const insertSchedule = async (tenantId: string, agent: string | null) => {
    const id = randomUUID();
    await t.pool.query(
      `INSERT INTO schedules (id, tenant_id, cron, timezone, agent, input, next_run_at)
       VALUES ($1, $2, '* * * * * *', 'UTC', $3, '{"messages":[{"role":"user","content":"tick"}]}', date_trunc('second', now()))`,
      [id, tenantId, agent],
    );
    return id;
  };
  const count = async (query: string, params: unknown[]) =>
    Number((await t.pool.query<{ n: string }>(query, params)).rows[0]?.n);
  const ticked = (scheduleId: string) => count("SELECT count(*) AS n FROM jobs WHERE schedule_id = $1", [scheduleId]);
  const tickCalls = (scheduleId: string) =>
    count("SELECT count(*) AS n FROM model_usage u JOIN jobs j ON j.id = u.job_id WHERE j.schedule_id = $1", [
      scheduleId,
    ]);
  /** Waits until the schedule's tick has moved past `ticks` more ticks: the firers did look at it. */
  const ticksPassed = async (scheduleId: string, ticks: number) => {
    const start = Date.now();
    await waitFor(
      `${ticks} ticks of ${scheduleId} passed`,
      async () => {
        const r = await t.pool.query<{ next_run_at: Date }>("SELECT next_run_at FROM schedules WHERE id = $1", [
          scheduleId,
        ]);
        return (r.rows[0]?.next_run_at.getTime() ?? 0) >= start + ticks * 1000;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    // The jobs a tick made (before the check) had time to run their model call.
    await new Promise((r) => setTimeout(r, 1500));
  };

  it("a schedule naming no model, when the default is closed to the tenant, is refused at create as a submit, a batch and a chat message are", async () => {
    const submit = await api().call<ErrorBody>("POST", "/v1/jobs", userMessage("x"));
    expect(submit.status).toBe(400);
    expect(submit.body.error).toEqual({ code: "invalid_request", message: CLOSED_DEFAULT });

    const schedule = await api().call<ErrorBody>("POST", "/v1/schedules", { ...userMessage("x"), cron: "0 9 * * *" });
    expect(schedule.status).toBe(400);
    expect(schedule.body.error).toEqual(submit.body.error);

    const batch = await api().call<ErrorBody>("POST", "/v1/jobs/batch", {
      jobs: [{ ...userMessage("a"), model: "mock-model" }, userMessage("b")],
    });
    expect(batch.status).toBe(400);
    expect(batch.body.error).toEqual({ code: "invalid_request", message: `jobs[1].${CLOSED_DEFAULT}` });

    const ws = await new Promise<WebSocket>((resolve, reject) => {
      const socket = new WebSocket(`${t.stack.gatewayUrl.replace(/^http/, "ws")}/v1/conversations/closed/ws`, {
        perMessageDeflate: false,
        headers: { authorization: `Bearer ${t.stack.apiKey}` },
      });
      socket.once("open", () => resolve(socket));
      socket.once("error", reject);
    });
    try {
      const frame = await new Promise<{ type: string; error?: { code: string; message: string } }>((resolve) => {
        ws.on("message", (data) => {
          const f = JSON.parse(String(data));
          if (f.type === "error" || f.type === "job") resolve(f);
        });
        ws.send(JSON.stringify({ type: "message", content: "hi", client_message_id: "m1" }));
      });
      expect(frame).toMatchObject({ type: "error", error: { code: "invalid_request", message: CLOSED_DEFAULT } });
    } finally {
      ws.close();
    }

    // An agent on an offered model is admitted; a PATCH of a schedule whose model was closed since
    // (its agent's version moved to `premium` under it) is refused unless it disables the schedule.
    const agent = await api().call("POST", "/v1/agents", { name: "offered", model: "mock-model" });
    expect(agent.status).toBe(201);
    const ok = await api().call<{ schedule: { id: string } }>("POST", "/v1/schedules", {
      ...userMessage("x"),
      cron: "0 9 * * *",
      agent: "offered",
    });
    expect(ok.status).toBe(201);
    await t.pool.query(
      `UPDATE agent_versions SET definition = jsonb_set(definition, '{model}', '"premium"') WHERE tenant_id = $1 AND name = 'offered'`,
      [t.stack.tenantId],
    );
    const patch = await api().call<ErrorBody>("PATCH", `/v1/schedules/${ok.body.schedule.id}`, { cron: "0 10 * * *" });
    expect(patch.status).toBe(400);
    expect(patch.body.error.code).toBe("invalid_request");
    expect(patch.body.error.message).toMatch(/^agent: offered@1's model: "premium" is not offered/);
    const off = await api().call("PATCH", `/v1/schedules/${ok.body.schedule.id}`, { enabled: false });
    expect(off.status).toBe(200);
    expect(await count("SELECT count(*) AS n FROM jobs WHERE tenant_id = $1", [t.stack.tenantId])).toBe(0);
  });

  it("a schedule row from before the check, on the closed default: its ticks make no job and no model call", async () => {
    const id = await insertSchedule(t.stack.tenantId, null);
    await ticksPassed(id, 3);
    const jobs = await ticked(id);
    const calls = await tickCalls(id);
    console.log(`closed default model: ticks made ${jobs} jobs and ${calls} model calls`);
    expect({ jobs, calls }).toEqual({ jobs: 0, calls: 0 });
    const row = await t.pool.query("SELECT last_run_at, enabled FROM schedules WHERE id = $1", [id]);
    // Skipped, not stopped: the next tick is still computed and the schedule stays enabled.
    expect(row.rows[0]).toEqual({ last_run_at: null, enabled: true });
    expect(await count("SELECT count(*) AS n FROM model_usage WHERE model = 'premium'", [])).toBe(0);
    // The tenant sees why: the refusal is the schedule's last_error.
    const view = await api().call<{ schedule: { last_error: string | null } }>("GET", `/v1/schedules/${id}`);
    expect(view.body.schedule.last_error).toBe(CLOSED_DEFAULT);
    // Logged with the reason, for the operator.
    const skipped = hostLines.filter((l) => l.includes(id) && l.includes("job admission refused it"));
    expect(skipped.length).toBeGreaterThan(0);
    expect(skipped[0]).toContain("model_not_allowed");
    expect(skipped[0]).toMatch(/omitted, so the default\): \\?"premium\\?" is not offered/);
    await t.pool.query("DELETE FROM schedules WHERE id = $1", [id]);
  }, 60_000);

  it("a spent daily budget: ticks make no job and no webhook delivery", async () => {
    const other = await tenant("spent");
    expect((await other.call("POST", "/v1/agents", { name: "cheap", model: "mock-model" })).status).toBe(201);
    await t.pool.query(
      `INSERT INTO webhooks (id, tenant_id, url, events, secret) VALUES ($1, 'spent', 'http://127.0.0.1:9/hook', $2, 'whsec_x')`,
      [randomUUID(), JSON.stringify(["job.failed", "job.completed"])],
    );
    // A budget of 0: the operator's way to stop a tenant's spend (docs/quota.md).
    await t.pool.query("UPDATE tenants SET daily_budget_usd = 0 WHERE id = 'spent'");
    const id = await insertSchedule("spent", "cheap");
    await ticksPassed(id, 3);
    const jobs = await ticked(id);
    const deliveries = await count("SELECT count(*) AS n FROM webhook_deliveries WHERE tenant_id = 'spent'", []);
    console.log(`budget spent: ticks made ${jobs} jobs and ${deliveries} webhook delivery rows`);
    expect({ jobs, deliveries }).toEqual({ jobs: 0, deliveries: 0 });
    expect(hostLines.some((l) => l.includes(id) && l.includes("budget_exceeded"))).toBe(true);
    await t.pool.query("DELETE FROM schedules WHERE id = $1", [id]);
  }, 60_000);

  it("a full queue: ticks make no job", async () => {
    const other = await tenant("full");
    expect((await other.call("POST", "/v1/agents", { name: "cheap", model: "mock-model" })).status).toBe(201);
    // MAX_QUEUED jobs queued for tomorrow: counted by the cap, never claimed today.
    await t.pool.query(
      `INSERT INTO jobs (id, tenant_id, input, run_at)
       SELECT gen_random_uuid(), 'full', '{"messages":[]}', now() + interval '1 day' FROM generate_series(1, $1::int)`,
      [MAX_QUEUED],
    );
    const refused = await other.call<ErrorBody>("POST", "/v1/jobs", { ...userMessage("x"), agent: "cheap" });
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe("rate_limited");
    const id = await insertSchedule("full", "cheap");
    await ticksPassed(id, 3);
    const jobs = await ticked(id);
    console.log(`queue full: ticks made ${jobs} jobs`);
    expect(jobs).toBe(0);
    expect(hostLines.some((l) => l.includes(id) && l.includes("rate_limited"))).toBe(true);
    await t.pool.query("DELETE FROM schedules WHERE id = $1", [id]);
  }, 60_000);

  it("a delegate call to an agent whose model is closed to the tenant creates no child: a model_not_allowed tool error", async () => {
    const other = await tenant("delegator");
    const jobs = agentJobs<JobView>(
      () => other,
      () => "mock-model",
    );
    await jobs.defineAgent("kid", {});
    await jobs.defineAgent("boss", { delegates: ["kid"] });
    // The kid's model was closed to the tenant after it was defined.
    await t.pool.query(
      `UPDATE agent_versions SET definition = jsonb_set(definition, '{model}', '"premium"') WHERE tenant_id = 'delegator' AND name = 'kid'`,
    );
    const call = `!mock ${JSON.stringify({ tool_calls: [{ name: "delegate_kid", args: { input: "work" } }] })}`;
    const id = await jobs.submit("boss", userMessage(call));
    await jobs.finished(id);
    const children = await count("SELECT count(*) AS n FROM jobs WHERE parent_job_id = $1", [id]);
    const premiumCalls = await count(
      "SELECT count(*) AS n FROM model_usage WHERE tenant_id = 'delegator' AND model = 'premium'",
      [],
    );
    console.log(`delegation to a closed model: ${children} children, ${premiumCalls} calls on it`);
    expect({ children, premiumCalls }).toEqual({ children: 0, premiumCalls: 0 });
    const events = await other.events(id);
    const result = events.find((e) => e.event === "tool.result");
    expect(result?.data).toMatch(/model_not_allowed/);
    expect(result?.data).toMatch(/"premium\\?" is not offered/);
  }, 60_000);
});

/** The Postgres-only cases' database (file-scoped: vitest declares such fixtures at the top level). */
const fixture = postgresTest({ connections: 2, tenants: ["acme"] });

describe("fireDueSchedules returns a refused tick's reason, and skips it (Postgres)", () => {
  let t: TestDb;
  fixture.beforeAll(({ testDb }) => {
    t = testDb;
  });

  const rulesOf = (registry: string, maxQueued = 0) => {
    const models = parseModelRegistry(registry);
    if (typeof models === "string") throw new Error(models);
    return { models, maxQueued };
  };
  const due = async (id: string) =>
    t.pool.query("UPDATE schedules SET next_run_at = date_trunc('second', now()) - interval '1 second' WHERE id = $1", [
      id,
    ]);
  const fire = async (rules: ReturnType<typeof rulesOf>) => {
    const { fired } = await fireDueSchedules(t.db as unknown as Db, rules);
    expect(fired).toHaveLength(1);
    return fired[0] as (typeof fired)[number];
  };

  it("model, budget and queue refusals each make no job, keep last_run_at, and move to the next tick", async () => {
    const id = randomUUID();
    await t.pool.query(
      `INSERT INTO schedules (id, tenant_id, cron, input, next_run_at)
       VALUES ($1, 'acme', '* * * * *', '{"messages":[{"role":"user","content":"x"}]}', date_trunc('second', now()) - interval '1 second')`,
      [id],
    );
    const open = JSON.stringify({ models: [{ name: "open" }] });

    const model = await fire(rulesOf(REGISTRY));
    expect(model).toMatchObject({
      scheduleId: id,
      jobId: null,
      scheduledFor: null,
      refused: { reason: "model_not_allowed" },
    });
    expect((model.next as Date).getTime()).toBeGreaterThan(Date.now());

    await due(id);
    await t.pool.query("UPDATE tenants SET daily_budget_usd = 0 WHERE id = 'acme'");
    expect((await fire(rulesOf(open))).refused).toMatchObject({ reason: "budget_exceeded", code: "budget_exceeded" });
    await t.pool.query("UPDATE tenants SET daily_budget_usd = NULL WHERE id = 'acme'");

    await due(id);
    await t.pool.query(`INSERT INTO jobs (id, tenant_id, input) VALUES (gen_random_uuid(), 'acme', '{"messages":[]}')`);
    expect((await fire(rulesOf(open, 1))).refused).toMatchObject({ reason: "rate_limited", code: "rate_limited" });
    const row = await t.pool.query("SELECT last_run_at FROM schedules WHERE id = $1", [id]);
    expect(row.rows[0].last_run_at).toBeNull();
    expect(Number((await t.pool.query("SELECT count(*) AS n FROM jobs WHERE schedule_id = $1", [id])).rows[0].n)).toBe(
      0,
    );

    // Admitted: the tick makes its job.
    await due(id);
    const made = await fire(rulesOf(open, 2));
    expect(made.refused).toBeNull();
    expect(made.jobId).not.toBeNull();
  });
});

describe("the queued count and the running jobs without indexes of their own (Postgres; migration 0024)", () => {
  let t: TestDb;
  fixture.beforeAll(({ testDb }) => {
    t = testDb;
  });

  /** Index names and node types of a statement's plan (EXPLAIN, JSON). */
  const planOf = async (statement: ReturnType<typeof sql>) => {
    const [row] = resultRows<{ "QUERY PLAN": Array<{ Plan: unknown }> }>(
      await t.db.execute(sql`explain (format json) ${statement}`),
    );
    const text = JSON.stringify(row?.["QUERY PLAN"][0]?.Plan);
    return {
      nodes: [...text.matchAll(/"Node Type":"([^"]+)"/g)].map((m) => m[1]),
      indexes: [...text.matchAll(/"Index Name":"([^"]+)"/g)].map((m) => m[1]),
    };
  };

  it("a tenant's queued jobs count the unclaimed and the claimed-not-started, nothing else, off two partial indexes, never its history", async () => {
    await t.pool.query("INSERT INTO tenants (id, name) VALUES ('qc', 'qc'), ('qc2', 'qc2')");
    const job = (tenant: string, extra = "", values = "") =>
      t.pool.query(
        `INSERT INTO jobs (id, tenant_id, input${extra}) VALUES (gen_random_uuid(), '${tenant}', '{"messages":[]}'${values})`,
      );
    for (let i = 0; i < 3; i++) await job("qc"); // queued, unclaimed
    for (let i = 0; i < 2; i++)
      await job("qc", ", owner, claimed_at, epoch, token", ", 'h1', now(), 1, gen_random_uuid()"); // claimed, not started
    await job(
      "qc",
      ", state, owner, epoch, token, execution_id",
      ", 'running', 'h1', 1, gen_random_uuid(), gen_random_uuid()",
    );
    await job("qc", ", state", ", 'waiting'");
    for (let i = 0; i < 4; i++) await job("qc2");
    // The tenant's history: what a count of `state = 'queued'` by tenant alone would walk.
    await t.pool.query(
      `INSERT INTO jobs (id, tenant_id, input, state, finished_at)
       SELECT gen_random_uuid(), 'qc', '{"messages":[]}', 'completed', now() FROM generate_series(1, 20000)`,
    );
    await t.pool.query("ANALYZE jobs");

    const count = async (tenant: string) =>
      Number(resultRows<{ n: string }>(await t.db.execute(sql`SELECT ${tenantQueuedSql(tenant)} AS n`))[0]?.n);
    expect(await count("qc")).toBe(5);
    expect(await count("qc2")).toBe(4);
    // The cap counts the claimed ones too: 5 queued + 1 new fits under 6, not under 5.
    expect(await stateRefusal(t.db as unknown as Db, "qc", 6)).toBeNull();
    expect(await stateRefusal(t.db as unknown as Db, "qc", 5)).toMatchObject({ code: "rate_limited" });

    const plan = await planOf(sql`SELECT ${tenantQueuedSql("qc")} AS n`);
    console.log(`queued count plan: nodes ${plan.nodes.join(" > ")}; indexes ${plan.indexes.join(", ")}`);
    expect(plan.nodes).not.toContain("Seq Scan");
    // The unclaimed by either partial index of them (the tenant's, or the fleet's when it has few),
    // the claimed by the held jobs; the tenant's 20,000 finished jobs are in neither.
    expect(plan.indexes).toContain("jobs_held_idx");
    expect(plan.indexes.some((i) => i === "jobs_admission_idx" || i === "jobs_ready_idx")).toBe(true);
    for (const i of plan.indexes) expect(["jobs_admission_idx", "jobs_ready_idx", "jobs_held_idx"]).toContain(i);

    // The idle look sees the claimed and the running job through jobs_held_idx.
    const work = await fleetWork(t.db as unknown as Db);
    expect({ claimed: work.claimed, running: work.running }).toEqual({ claimed: true, running: true });
  });

  it("a running job without an owner is refused by the database, so the reaper's `owner IS NOT NULL` misses none", async () => {
    const id = randomUUID();
    await t.pool.query(
      `INSERT INTO jobs (id, tenant_id, input, state, owner, epoch, token, execution_id, heartbeat_at)
       VALUES ($1, 'acme', '{"messages":[]}', 'running', 'h2', 1, gen_random_uuid(), gen_random_uuid(), now() - interval '1 hour')`,
      [id],
    );
    await expect(t.pool.query("UPDATE jobs SET owner = NULL WHERE id = $1", [id])).rejects.toMatchObject({
      code: "23514",
      constraint: "jobs_running_owner_ck",
    });
    // The silent run is reaped (re-queued for a new execution: no agent, so the default recovery).
    const reaped = await reapRuns(t.db as unknown as Db, 1000);
    expect(reaped.map((r) => [r.id, r.state])).toContainEqual([id, "recovered"]);
    const reapPlan = await planOf(
      sql`SELECT id FROM jobs j WHERE j.state = 'running' AND j.owner IS NOT NULL AND j.heartbeat_at < now()`,
    );
    expect(reapPlan.nodes).not.toContain("Seq Scan");
    expect(reapPlan.indexes).toContain("jobs_held_idx");
  });
});

/**
 * Sub-agents' statements on a real Postgres: the suspend that creates a turn's children (only
 * when the suspend happens), the trigger that re-queues the parent when the turn's last child
 * ends (exactly once when siblings end at the same moment, never for a parent that is no longer
 * waiting), and the subtree cancel in one statement.
 */
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { planChildren } from "../../sandbox-host/runner/delegate";
import { ActiveRun, type Emit, Execution, type RunDeps } from "../../sandbox-host/runner/run-context";
import { TRACING_OFF } from "../../sandbox-host/tracing/tracing";
import { AgentDefinitionSchema } from "../../src/contracts/agent";
import { createAgent } from "../../src/db/agents-repo";
import { budgetRefusal } from "../../src/db/budget-repo";
import { getTree } from "../../src/db/children-repo";
import { requestTreeCancel } from "../../src/db/control-repo";
import { recordModelUsage } from "../../src/db/run-repo";
import { jobs, jobWaits } from "../../src/db/schema";
import { setTenantSettings } from "../../src/db/tenants-repo";
import { suspendJob } from "../../src/db/wait-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import { claimJob, markStarted } from "../../tools/lib/single-row-writes";
import type { TestDb } from "../helpers/db";
import { childJob, delegateWait } from "../helpers/delegation";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 8, tenants: ["s1"] });
let t: TestDb;
test.beforeAll(({ testDb }) => {
  t = testDb;
});

async function start(jobId: string): Promise<ExecutionIdentity> {
  const token = randomUUID();
  const epoch = (await claimJob(t.db, jobId, "h", token)) as number;
  const id = { jobId, host: "h", epoch, token, executionId: randomUUID() };
  expect(await markStarted(t.db, id)).toBe(true);
  return id;
}
async function runningJob(): Promise<ExecutionIdentity> {
  const jobId = randomUUID();
  await t.db.insert(jobs).values({ id: jobId, tenantId: "s1", input: { messages: [{ role: "user", content: "x" }] } });
  return start(jobId);
}
const row = async (id: string) => (await t.db.select().from(jobs).where(eq(jobs.id, id)))[0];

describe("sub-agents in Postgres", () => {
  it("the suspend inserts the turn's children (tenant, root, depth, parent execution, priority); a fenced-out one inserts none", async () => {
    const parent = await runningJob();
    // Admission: a child is admitted with its parent's priority (docs/limits.md "Admission").
    await t.db.update(jobs).set({ priority: 7 }).where(eq(jobs.id, parent.jobId));
    const stale = [childJob("s1")];
    expect((await suspendJob(t.db, { ...parent, token: randomUUID() }, delegateWait(stale))).suspended).toBe(false);
    expect(await row(stale[0]?.id as string)).toBeUndefined();
    const kids = [childJob("a"), childJob("b")];
    expect((await suspendJob(t.db, parent, delegateWait(kids))).suspended).toBe(true);
    for (const k of kids) {
      expect(await row(k.id)).toMatchObject({
        state: "queued",
        tenantId: "s1",
        parentJobId: parent.jobId,
        parentExecutionId: parent.executionId,
        parentCallId: k.callId,
        rootJobId: parent.jobId,
        depth: 1,
        agentName: "worker",
        timeoutMs: 900_000,
        priority: 7,
      });
    }
    expect((await row(parent.jobId))?.state).toBe("waiting");
  });

  it("a suspend refused because a cancel was requested first inserts no children (the owner still holds the fence)", async () => {
    // The fence matches here (unlike a stale token above): only the cancel keeps the suspend
    // from happening, so this is what tells "children only when the suspend happened" from
    // "children whenever the owner's identity matches".
    const parent = await runningJob();
    expect(await requestTreeCancel(t.db, "s1", parent.jobId)).toEqual({
      status: "requested",
      requested: [parent.jobId],
    });
    const kids = [childJob("a"), childJob("b")];
    expect(await suspendJob(t.db, parent, delegateWait(kids))).toEqual({ suspended: false, cancelRequested: true });
    for (const k of kids) expect(await row(k.id), `child ${k.callId}`).toBeUndefined();
    const n = await t.pool.query<{ n: string }>("select count(*) as n from jobs where parent_job_id = $1", [
      parent.jobId,
    ]);
    expect(Number(n.rows[0]?.n)).toBe(0);
    expect((await row(parent.jobId))?.state).toBe("running");
  });

  it("siblings ending at the same moment re-queue the parent exactly once, after the last", async () => {
    for (let round = 0; round < 10; round++) {
      const parent = await runningJob();
      const kids = [childJob("a"), childJob("b"), childJob("c")];
      await suspendJob(t.db, parent, delegateWait(kids));
      const ids = [];
      for (const k of kids) ids.push(await start(k.id));
      // The first ends alone; the last two end in concurrent transactions.
      await t.pool.query("update jobs set state = 'completed', finished_at = now() where id = $1", [kids[0]?.id]);
      expect((await row(parent.jobId))?.state).toBe("waiting");
      const [c1, c2] = [await t.pool.connect(), await t.pool.connect()];
      try {
        await c1.query("begin");
        await c2.query("begin");
        await c1.query("update jobs set state = 'completed', finished_at = now() where id = $1", [kids[1]?.id]);
        const second = c2.query("update jobs set state = 'failed', finished_at = now() where id = $1", [kids[2]?.id]);
        await new Promise((r) => setTimeout(r, 50));
        await c1.query("commit");
        await second;
        await c2.query("commit");
      } finally {
        c1.release();
        c2.release();
      }
      const p = await row(parent.jobId);
      expect(p?.state, `round ${round}`).toBe("queued");
      const waits = await t.db.select().from(jobWaits).where(eq(jobWaits.jobId, parent.jobId));
      expect(waits).toHaveLength(1);
      expect(waits[0]).toMatchObject({ kind: "children", decision: "children", decidedBy: "children" });
    }
  });

  it("a child ending after its parent was cancelled is not delivered: the parent stays cancelled", async () => {
    const parent = await runningJob();
    const kids = [childJob("a")];
    await suspendJob(t.db, parent, delegateWait(kids));
    const k = await start(kids[0]?.id as string);
    expect(await requestTreeCancel(t.db, "s1", parent.jobId)).toEqual({ status: "cancelled", requested: [k.jobId] });
    expect((await row(k.jobId))?.cancelRequestedAt).not.toBeNull();
    // The child's host finished before it saw the cancel.
    await t.pool.query("update jobs set state = 'completed', output = 'late', finished_at = now() where id = $1", [
      k.jobId,
    ]);
    expect((await row(parent.jobId))?.state).toBe("cancelled");
    expect((await row(k.jobId))?.output).toBe("late");
    const waits = await t.db.select().from(jobWaits).where(eq(jobWaits.jobId, parent.jobId));
    expect(waits[0]?.decision).toBeNull();
  });

  it("the subtree cancel covers grandchildren in one statement: queued ones cancelled, running ones requested", async () => {
    const root = await runningJob();
    const kids = [childJob("a"), childJob("b")];
    await suspendJob(t.db, root, delegateWait(kids));
    const mid = await start(kids[0]?.id as string);
    const grand = [childJob("g")];
    await suspendJob(t.db, mid, delegateWait(grand));
    const g = await start(grand[0]?.id as string);
    expect(await row(g.jobId)).toMatchObject({ depth: 2, rootJobId: root.jobId });
    const r = await requestTreeCancel(t.db, "s1", root.jobId);
    expect(r).toEqual({ status: "cancelled", requested: [g.jobId] });
    expect((await row(kids[1]?.id as string))?.state).toBe("cancelled");
    expect((await row(mid.jobId))?.state).toBe("cancelled");
    expect((await row(g.jobId))?.state).toBe("running");
    expect(await requestTreeCancel(t.db, "other", root.jobId)).toEqual({ status: "not_found", requested: [] });
  });

  it("getTree is the tenant's: another tenant asking for its root or a node inside it gets null; any case of the id names the node", async () => {
    const root = await runningJob();
    const kids = [childJob("a")];
    await suspendJob(t.db, root, delegateWait(kids));
    const mid = await start(kids[0]?.id as string);
    const grand = [childJob("g")];
    await suspendJob(t.db, mid, delegateWait(grand));
    const tree = await getTree(t.db, "s1", root.jobId);
    expect(tree?.children.map((c) => c.id)).toEqual([mid.jobId]);
    expect(tree?.children[0]?.children.map((c) => c.id)).toEqual([grand[0]?.id]);
    // Another tenant: its own job ids only, at every level (the recursion starts from a row it owns).
    await t.pool.query("insert into tenants (id, name) values ('s2', 's2') on conflict do nothing");
    for (const id of [root.jobId, mid.jobId, grand[0]?.id as string]) {
      expect(await getTree(t.db, "s2", id), id).toBeNull();
    }
    // An upper-case UUID names the same job on every job route (tenantJobId, getJob): here too,
    // with the node asked for as the top (no parent) and its subtree under it.
    const upper = await getTree(t.db, "s1", mid.jobId.toUpperCase());
    expect(upper).toMatchObject({ id: mid.jobId, parent_job_id: null, parent_call_id: null, depth: 1 });
    expect(upper?.children.map((c) => c.id)).toEqual([grand[0]?.id]);
  });

  it("prices each call at the registry's prices; a tree sums cost_usd per subtree, null where nothing was priced", async () => {
    const pricing = { inputUsdPerMtok: 2.5, outputUsdPerMtok: 10 };
    const root = await runningJob();
    const kids = [childJob("priced"), childJob("unpriced")];
    await suspendJob(t.db, root, delegateWait(kids));
    const priced = await start(kids[0]?.id as string);
    const unpriced = await start(kids[1]?.id as string);
    const use = (id: ExecutionIdentity, p: number, c: number, withPrice: boolean) =>
      recordModelUsage(t.db, id, {
        tenantId: "s1",
        model: withPrice ? "m-priced" : "m-free",
        promptTokens: p,
        completionTokens: c,
        estimated: false,
        ...(withPrice ? { pricing } : {}),
      });
    await use(root, 1000, 100, true); // 0.0025 + 0.001
    await use(priced, 400, 30, true); // 0.001 + 0.0003
    await use(priced, 1, 1, true); // 0.0000025 + 0.00001
    await use(unpriced, 5000, 5000, false);
    expect((await row(root.jobId))?.costUsd).toBe(0.0035);
    expect((await row(priced.jobId))?.costUsd).toBe(0.0013125);
    expect((await row(unpriced.jobId))?.costUsd).toBeNull();
    const tree = await getTree(t.db, "s1", root.jobId);
    const a = tree?.children.find((c) => c.id === priced.jobId);
    const b = tree?.children.find((c) => c.id === unpriced.jobId);
    expect(a?.usage.cost_usd).toBe(0.0013125);
    expect(b?.usage).toEqual({ prompt_tokens: 5000, completion_tokens: 5000, model_calls: 1, cost_usd: null });
    expect(b?.subtree_usage.cost_usd).toBeNull();
    expect(tree?.usage.cost_usd).toBe(0.0035);
    expect(tree?.subtree_usage.cost_usd).toBeCloseTo(0.0048125, 15);
    expect(tree?.subtree_usage.prompt_tokens).toBe(6401);
  });

  it("a delegate call that would queue past the tenant's queued-jobs limit is a rate_limited tool error", async () => {
    await t.pool.query("insert into tenants (id, name) values ('q1', 'q1')");
    const definition = AgentDefinitionSchema.parse({ model: "m", delegates: ["worker"] });
    await createAgent(t.db, "q1", "worker", AgentDefinitionSchema.parse({ model: "m" }), {
      maxAgents: 0,
      maxVersions: 0,
      maxBytes: 0,
    });
    const jobId = randomUUID();
    await t.db.insert(jobs).values({ id: jobId, tenantId: "q1", input: { messages: [] } });
    const parent = await start(jobId);
    // Two of the tenant's jobs already wait in the queue; the limit is 4, so two children fit.
    for (let i = 0; i < 2; i++) {
      await t.db.insert(jobs).values({ id: randomUUID(), tenantId: "q1", input: { messages: [] } });
    }
    const deps = {
      db: t.db,
      models: { entries: [{ name: "m" }] },
      maxQueuedJobsPerTenant: 4,
      tracing: TRACING_OFF,
    } as unknown as RunDeps;
    // The parent's execution: only its identity, its row's tenant and its events matter here.
    const parentExecution = (d: RunDeps, emit: Emit) =>
      new Execution({ deps: d, run: new ActiveRun(parent).start(), emit, job: { tenantId: "q1" } as never });
    const calls = ["c1", "c2", "c3"].map((id) => ({ id, name: "delegate_worker", args: { input: `task ${id}` } }));
    const emitted: string[] = [];
    const plan = await planChildren(
      parentExecution(deps, (type) => void emitted.push(type)),
      { definition, calls },
    );
    expect(plan.children.map((c) => c.callId)).toEqual(["c1", "c2"]);
    expect(plan.checkpoint.calls.c3).toEqual({
      error: { code: "rate_limited", message: "this tenant already has 4 queued jobs (the limit)" },
    });
    expect(emitted).toEqual(["tool.call", "tool.call", "tool.call"]);
    // 0 turns the check off, as on the gateway.
    const open = await planChildren(
      parentExecution({ ...deps, maxQueuedJobsPerTenant: 0 }, () => {}),
      {
        definition,
        calls,
      },
    );
    expect(open.children).toHaveLength(3);
  });

  it("a delegate call of a tenant whose daily budget is spent is a budget_exceeded tool error; under it, a child", async () => {
    await t.pool.query("insert into tenants (id, name, daily_budget_usd) values ('b1', 'b1', 0.01)");
    const definition = AgentDefinitionSchema.parse({ model: "m", delegates: ["worker"] });
    await createAgent(t.db, "b1", "worker", AgentDefinitionSchema.parse({ model: "m" }), {
      maxAgents: 0,
      maxVersions: 0,
      maxBytes: 0,
    });
    const jobId = randomUUID();
    await t.db.insert(jobs).values({ id: jobId, tenantId: "b1", input: { messages: [] } });
    const parent = await start(jobId);
    const deps = { db: t.db, models: { entries: [{ name: "m" }] }, tracing: TRACING_OFF } as unknown as RunDeps;
    const plan = () =>
      planChildren(
        new Execution({
          deps,
          run: new ActiveRun(parent).start(),
          emit: () => {},
          job: { tenantId: "b1" } as never,
        }),
        { definition, calls: [{ id: "d1", name: "delegate_worker", args: { input: "task" } }] },
      );
    expect((await plan()).children).toHaveLength(1);
    // 0.009 $ spent: still under. The call that reaches 0.01 $ closes the day.
    const use = (p: number) =>
      recordModelUsage(t.db, parent, {
        tenantId: "b1",
        model: "m",
        promptTokens: p,
        completionTokens: 0,
        estimated: false,
        pricing: { inputUsdPerMtok: 10, outputUsdPerMtok: 10 },
      });
    await use(900);
    expect((await plan()).children).toHaveLength(1);
    await use(100);
    const refused = await plan();
    expect(refused.children).toEqual([]);
    expect(refused.checkpoint.calls.d1).toEqual({
      error: {
        code: "budget_exceeded",
        message: "this tenant's daily budget is spent; no child job until the next UTC midnight",
      },
    });
    const r = await budgetRefusal(t.db, "b1");
    expect(r).toMatchObject({ budgetUsd: 0.01, spentUsd: 0.01 });
    // Retry-After: the seconds to the next UTC midnight, by Postgres's clock.
    const now = new Date();
    const midnight = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
    expect(Math.abs((r?.retryAfterS ?? 0) - (midnight - now.getTime()) / 1000)).toBeLessThan(5);
    // Another tenant's spend is its own.
    expect(await budgetRefusal(t.db, "s1")).toBeNull();
    await setTenantSettings(t.db, "b1", { dailyBudgetUsd: null });
    expect(await budgetRefusal(t.db, "b1")).toBeNull();
    expect((await plan()).children).toHaveLength(1);
  });
});

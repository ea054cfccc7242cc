/**
 * Agents as data on the gateway, through the real parts (the gateway in workerd, Postgres through
 * the Neon HTTP driver's local proxy): versions are immutable, `name` resolves to the latest at
 * submit and `name@N` pins, a later version never reaches a submitted job, another tenant's
 * agent does not exist, and usage sums model_usage rows per day and model. No host runs: what
 * is checked here is what the gateway records, not a run.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { JobView } from "../../src/contracts/job";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient } from "../helpers/api";
import { testPool } from "../helpers/db";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

/** The operator's registry: mock-model for everyone, "big-model" for the dev tenant only, "other-model" for "other" only. */
const REGISTRY = JSON.stringify({
  default: "mock-model",
  models: [
    { name: "mock-model" },
    { name: "big-model", tenants: ["dev"] },
    { name: "other-model", tenants: ["other"] },
  ],
});

interface AgentView {
  name: string;
  version: number;
  latest_version: number;
  model: string;
  instructions: string;
  tools: string[];
  limits: { max_turns: number; max_output_tokens: number | null; timeout_s: number | null };
  sampling: { temperature: number | null; top_p: number | null };
  response_format: Record<string, unknown> | null;
  archived_at: string | null;
  created_at: string;
}
type ErrorBody = { error: { code: string; message: string } };

const input = { messages: [{ role: "user", content: "hello" }] };
const AGENT_CAP = 30;
const VERSION_CAP = 10;

describe.skipIf(!canRun)("agents on the gateway", () => {
  let stack: Stack;
  let api: ReturnType<typeof apiClient>;
  let other: ReturnType<typeof apiClient>;
  let otherKey: string;
  let pool: pg.Pool;

  beforeAll(async () => {
    // Caps low enough to reach here, above what the other tests make (docs/limits.md).
    stack = await startStack({
      hosts: 0,
      modelRegistry: REGISTRY,
      gatewayVars: { MAX_AGENTS_PER_TENANT: String(AGENT_CAP), MAX_VERSIONS_PER_AGENT: String(VERSION_CAP) },
    });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
    pool = testPool(stack.databaseUrl, 2);
    const db = drizzle(pool, { schema });
    await createTenant(db, "other");
    otherKey = (await createApiKey(db, "other")).key;
    other = apiClient(stack.gatewayUrl, otherKey);
  }, 180_000);

  afterAll(async () => {
    await pool?.end();
    await stack?.stop();
  }, 60_000);

  const create = (body: Record<string, unknown>, client = api) =>
    client.call<{ agent: AgentView }>("POST", "/v1/agents", body);
  const newVersion = (name: string, body: Record<string, unknown>, client = api) =>
    client.call<{ agent: AgentView }>("POST", `/v1/agents/${name}/versions`, body);
  const submit = (body: Record<string, unknown>, client = api) =>
    client.call<{ job: JobView } & ErrorBody>("POST", "/v1/jobs", body);

  it("creates version 1 with the defaults filled in, and refuses the same name again", async () => {
    const r = await create({ name: "writer", model: "mock-model", instructions: "Write briefly." });
    expect(r.status).toBe(201);
    expect(r.body.agent).toMatchObject({
      name: "writer",
      version: 1,
      latest_version: 1,
      model: "mock-model",
      instructions: "Write briefly.",
      description: "",
      tools: [],
      limits: {
        max_turns: 8,
        max_output_tokens: null,
        timeout_s: null,
        max_cost_usd: null,
        max_tokens: null,
        on_budget: "fail",
      },
      sampling: { temperature: null, top_p: null },
      priority: 0,
      sandbox_profile: "default",
      response_format: null,
      approval: { deadline_s: 86_400, on_deadline: "deny" },
      recovery: { on_host_loss: "resume", max_recoveries: 3 },
      ask_user: false,
      workspace: "run",
      mcp_servers: [],
      delegates: [],
      archived_at: null,
    });
    expect(Number.isNaN(Date.parse(r.body.agent.created_at))).toBe(false);
    const again = await create({ name: "writer", model: "mock-model" });
    expect(again.status).toBe(409);
    expect((again.body as unknown as ErrorBody).error.code).toBe("conflict");
    const badWorkspace = await create({ name: "scratch", model: "mock-model", workspace: "shared" });
    expect(badWorkspace.status).toBe(400);
    expect((badWorkspace.body as unknown as ErrorBody).error).toMatchObject({ code: "invalid_request" });
    expect((badWorkspace.body as unknown as ErrorBody).error.message).toContain("workspace");
    const got = await api.call<{ agent: AgentView }>("GET", "/v1/agents/writer");
    expect(got.body.agent).toEqual(r.body.agent);
  });

  it("adds immutable versions: the latest moves, an old version reads as it was", async () => {
    const v1 = await create({ name: "editor", model: "mock-model", instructions: "v1 words", tools: ["shell"] });
    const v2 = await newVersion("editor", {
      model: "big-model",
      instructions: "v2 words",
      sampling: { temperature: 0.3 },
      response_format: { type: "object", properties: { verdict: { type: "string" } }, required: ["verdict"] },
    });
    expect(v2.status).toBe(201);
    expect(v2.body.agent).toMatchObject({ version: 2, latest_version: 2, model: "big-model", tools: [] });
    expect(v2.body.agent.sampling).toEqual({ temperature: 0.3, top_p: null });

    const old = await api.call<{ agent: AgentView }>("GET", "/v1/agents/editor/versions/1");
    expect(old.status).toBe(200);
    expect(old.body.agent).toEqual({ ...v1.body.agent, latest_version: 2 });
    const latest = await api.call<{ agent: AgentView }>("GET", "/v1/agents/editor");
    expect(latest.body.agent).toEqual(v2.body.agent);
    const versions = await api.call<{ versions: AgentView[]; next_cursor: string | null }>(
      "GET",
      "/v1/agents/editor/versions",
    );
    expect(versions.body.versions.map((v) => [v.version, v.instructions])).toEqual([
      [2, "v2 words"],
      [1, "v1 words"],
    ]);
    expect(versions.body.next_cursor).toBeNull();
    const missing = await api.call<ErrorBody>("GET", "/v1/agents/editor/versions/3");
    expect(missing.status).toBe(404);
  });

  it("pages the live agents by name and an agent's versions newest first", async () => {
    for (const name of ["page-a", "page-b", "page-c"])
      expect((await create({ name, model: "mock-model" })).status).toBe(201);
    for (let i = 0; i < 2; i++) expect((await newVersion("page-c", { model: "mock-model" })).status).toBe(201);
    const names: string[] = [];
    let cursor: string | null = null;
    do {
      const q: string = cursor ? `&cursor=${cursor}` : "";
      const page = await api.call<{ agents: AgentView[]; next_cursor: string | null }>("GET", `/v1/agents?limit=2${q}`);
      expect(page.status).toBe(200);
      expect(page.body.agents.length).toBeLessThanOrEqual(2);
      names.push(...page.body.agents.map((a) => a.name));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(names.filter((n) => n.startsWith("page-"))).toEqual(["page-a", "page-b", "page-c"]);
    expect(names).toEqual([...names].sort());
    const first = await api.call<{ versions: AgentView[]; next_cursor: string }>(
      "GET",
      "/v1/agents/page-c/versions?limit=2",
    );
    expect(first.body.versions.map((v) => v.version)).toEqual([3, 2]);
    const rest = await api.call<{ versions: AgentView[]; next_cursor: string | null }>(
      "GET",
      `/v1/agents/page-c/versions?limit=2&cursor=${first.body.next_cursor}`,
    );
    expect(rest.body.versions.map((v) => v.version)).toEqual([1]);
    expect(rest.body.next_cursor).toBeNull();
  });

  it("resolves `name` to the latest version at submit and `name@N` to that one; a later version changes neither job", async () => {
    await create({ name: "runner", model: "mock-model", tools: ["read_file"], limits: { timeout_s: 120 } });
    await newVersion("runner", { model: "big-model", tools: ["shell", "list_dir"], limits: { timeout_s: 30 } });

    const latest = await submit({ input, agent: "runner" });
    expect(latest.status).toBe(202);
    expect(latest.body.job).toMatchObject({
      agent: { name: "runner", version: 2 },
      model: "big-model",
      tools: ["shell", "list_dir"],
      usage: { prompt_tokens: 0, completion_tokens: 0, model_calls: 0, estimated: false, cost_usd: null },
      output_json: null,
    });
    const pinned = await submit({ input, agent: "runner@1" });
    expect(pinned.body.job).toMatchObject({
      agent: { name: "runner", version: 1 },
      model: "mock-model",
      tools: ["read_file"],
    });

    const { rows } = await pool.query<{ id: string; agent_name: string; agent_version: number; timeout_ms: number }>(
      "select id, agent_name, agent_version, timeout_ms from jobs where id = any($1::uuid[]) order by agent_version",
      [[latest.body.job.id, pinned.body.job.id]],
    );
    expect(rows.map((r) => [r.agent_name, r.agent_version, r.timeout_ms])).toEqual([
      ["runner", 1, 120_000],
      ["runner", 2, 30_000],
    ]);

    // A version made after the submit: the jobs keep theirs, a new submit takes it.
    await newVersion("runner", { model: "mock-model" });
    for (const [id, version] of [
      [latest.body.job.id, 2],
      [pinned.body.job.id, 1],
    ] as const) {
      const job = await api.call<{ job: JobView }>("GET", `/v1/jobs/${id}`);
      expect(job.body.job.agent).toEqual({ name: "runner", version });
    }
    expect((await submit({ input, agent: "runner" })).body.job.agent).toEqual({ name: "runner", version: 3 });

    // Without an agent: the built-in default agent, as before.
    const plain = await submit({ input });
    expect(plain.status).toBe(202);
    expect(plain.body.job).toMatchObject({ agent: null, model: null, tools: [] });
    const { rows: plainRows } = await pool.query<{ timeout_ms: number }>("select timeout_ms from jobs where id = $1", [
      plain.body.job.id,
    ]);
    expect(plainRows[0]?.timeout_ms).toBe(900_000);
  });

  it("refuses an unknown agent, an unknown version and an unknown model at submit with 400", async () => {
    const unknown = await submit({ input, agent: "nobody" });
    expect([unknown.status, unknown.body.error.message]).toEqual([
      400,
      'agent: no agent named "nobody" (GET /v1/agents)',
    ]);
    await create({ name: "short", model: "mock-model" });
    const noVersion = await submit({ input, agent: "short@7" });
    expect(noVersion.status).toBe(400);
    expect(noVersion.body.error.message).toMatch(/^agent: "short" has no version 7/);
    const model = await submit({ input, model: "gpt-unknown" });
    expect(model.status).toBe(400);
    expect(model.body.error.message).toMatch(/^model: "gpt-unknown" is not offered/);
    const modelOfOther = await submit({ input, model: "other-model" });
    expect(modelOfOther.status).toBe(400);
    const both = await submit({ input, agent: "short", model: "mock-model" });
    expect(both.status).toBe(400);
    expect(both.body.error.message).toMatch(/either `agent` or `model`\/`tools`/);
  });

  it("archives idempotently: gone from the list, readable, no new versions, no new jobs (409)", async () => {
    await create({ name: "retiring", model: "mock-model" });
    const first = await api.call<{ agent: AgentView }>("POST", "/v1/agents/retiring/archive");
    expect(first.status).toBe(200);
    expect(first.body.agent.archived_at).not.toBeNull();
    const again = await api.call<{ agent: AgentView }>("POST", "/v1/agents/retiring/archive");
    expect(again.body.agent.archived_at).toBe(first.body.agent.archived_at);

    const list = await api.call<{ agents: AgentView[] }>("GET", "/v1/agents?limit=100");
    expect(list.body.agents.map((a) => a.name)).not.toContain("retiring");
    expect((await api.call<{ agent: AgentView }>("GET", "/v1/agents/retiring")).body.agent.archived_at).toBe(
      first.body.agent.archived_at,
    );
    const version = await newVersion("retiring", { model: "mock-model" });
    expect(version.status).toBe(409);
    for (const agent of ["retiring", "retiring@1"]) {
      const job = await submit({ input, agent });
      expect(job.status).toBe(409);
      expect(job.body.error).toEqual({
        code: "conflict",
        message: 'agent: "retiring" is archived; no new jobs may run it',
      });
    }
    expect((await create({ name: "retiring", model: "mock-model" })).status).toBe(409);
  });

  it("another tenant's agent is not there: 404 on every agent route, 400 at submit", async () => {
    await create({ name: "private", model: "mock-model" });
    for (const [method, path] of [
      ["GET", "/v1/agents/private"],
      ["GET", "/v1/agents/private/versions"],
      ["GET", "/v1/agents/private/versions/1"],
      ["POST", "/v1/agents/private/archive"],
    ] as const) {
      const r = await other.call<ErrorBody>(method, path);
      expect([path, r.status, r.body.error.code]).toEqual([path, 404, "not_found"]);
    }
    const v = await newVersion("private", { model: "mock-model" }, other);
    expect(v.status).toBe(404);
    const job = await submit({ input, agent: "private" }, other);
    expect(job.status).toBe(400);
    const list = await other.call<{ agents: AgentView[] }>("GET", "/v1/agents");
    expect(list.body.agents.map((a) => a.name)).not.toContain("private");
    // The same name is free for the other tenant, and stays its own.
    expect((await create({ name: "private", model: "other-model" }, other)).status).toBe(201);
    expect((await api.call<{ agent: AgentView }>("GET", "/v1/agents/private")).body.agent.model).toBe("mock-model");
    // Its model is not offered to this tenant, whose agents may not name it.
    const refused = await create({ name: "borrower", model: "other-model" });
    expect(refused.status).toBe(400);
    expect((refused.body as unknown as ErrorBody).error.message).toMatch(/^model: "other-model" is not offered/);
  });

  it("binds an idempotency key to `agent` as sent", async () => {
    await create({ name: "idem", model: "mock-model" });
    const first = await submit({ input, agent: "idem", idempotency_key: "idem-1" });
    expect(first.status).toBe(202);
    const replay = await submit({ input, agent: "idem", idempotency_key: "idem-1" });
    expect([replay.status, replay.body.job.id]).toEqual([200, first.body.job.id]);
    const pinned = await submit({ input, agent: "idem@1", idempotency_key: "idem-1" });
    expect(pinned.status).toBe(409);
    expect(pinned.body.error.code).toBe("idempotency_mismatch");
    // Archived since: a retry still gets its job; a new key is refused.
    await api.call("POST", "/v1/agents/idem/archive");
    const late = await submit({ input, agent: "idem", idempotency_key: "idem-1" });
    expect([late.status, late.body.job?.id]).toEqual([200, first.body.job.id]);
    expect((await submit({ input, agent: "idem", idempotency_key: "idem-2" })).status).toBe(409);
  });

  it("numbers concurrent new versions one after another, never the same twice", async () => {
    await create({ name: "busy", model: "mock-model" });
    const made = await Promise.all(
      Array.from({ length: 6 }, (_, i) => newVersion("busy", { model: "mock-model", instructions: `edit ${i}` })),
    );
    expect(made.map((r) => r.status)).toEqual(Array(6).fill(201));
    expect(made.map((r) => r.body.agent.version).sort((a, b) => a - b)).toEqual([2, 3, 4, 5, 6, 7]);
    const versions = await api.call<{ versions: AgentView[] }>("GET", "/v1/agents/busy/versions?limit=100");
    expect(versions.body.versions.map((v) => v.version)).toEqual([7, 6, 5, 4, 3, 2, 1]);
    // Each stored version holds the body that created it.
    for (const r of made) {
      const v = await api.call<{ agent: AgentView }>("GET", `/v1/agents/busy/versions/${r.body.agent.version}`);
      expect(v.body.agent.instructions).toBe(r.body.agent.instructions);
    }
  });

  it("answers 409 agent_limit_reached past the tenant's agent cap and an agent's version cap, exactly under a burst", async () => {
    const db = drizzle(pool, { schema });
    await createTenant(db, "capped");
    const capped = apiClient(stack.gatewayUrl, (await createApiKey(db, "capped")).key);
    const agents = await Promise.all(
      Array.from({ length: AGENT_CAP + 10 }, (_, i) => create({ name: `cap-${i}`, model: "mock-model" }, capped)),
    );
    expect(agents.filter((r) => r.status === 201)).toHaveLength(AGENT_CAP);
    const refused = agents.filter((r) => r.status !== 201) as unknown as { status: number; body: ErrorBody }[];
    expect(refused.map((r) => [r.status, r.body.error.code])).toEqual(Array(10).fill([409, "agent_limit_reached"]));
    expect(refused[0]?.body.error.message).toMatch(/already has 30 agents/);

    // Which 30 of the burst won is the server's order, not the send order (on a busy machine
    // "cap-0" may be one of the refused): the version burst goes to an agent that was made.
    const made = agents.find((r) => r.status === 201)?.body.agent.name ?? "";
    const versions = await Promise.all(
      Array.from({ length: VERSION_CAP + 5 }, (_, i) =>
        newVersion(made, { model: "mock-model", instructions: `v${i}` }, capped),
      ),
    );
    // Every answer's status and code in one value, so a failure shows what the refused ones were.
    const outcomes = (versions as unknown as { status: number; body: Partial<ErrorBody> }[]).map((r) =>
      r.status === 201 ? "201" : `${r.status} ${r.body.error?.code}: ${r.body.error?.message}`,
    );
    expect(
      outcomes.filter((o) => o === "201"),
      outcomes.join("\n"),
    ).toHaveLength(VERSION_CAP - 1);
    const over = versions.filter((r) => r.status !== 201) as unknown as { status: number; body: ErrorBody }[];
    expect(over.map((r) => [r.status, r.body.error.code])).toEqual(Array(6).fill([409, "agent_limit_reached"]));
    expect(over[0]?.body.error.message).toBe(
      `agent "${made}" already has 10 versions, the most one agent may have (docs/limits.md)`,
    );
    // Nothing was half-made: the agent reads at its last version, and the list holds exactly the cap.
    const latest = await capped.call<{ agent: AgentView }>("GET", `/v1/agents/${made}`);
    expect(latest.body.agent.latest_version).toBe(VERSION_CAP);
    const page = await capped.call<{ agents: AgentView[] }>("GET", "/v1/agents?limit=100");
    expect(page.body.agents).toHaveLength(AGENT_CAP);
  });

  it("shows the usage counters and the JSON answer on the job view", async () => {
    const job = (await submit({ input })).body.job;
    await pool.query(
      `update jobs set prompt_tokens = 1200, completion_tokens = 34, model_calls = 3, usage_estimated = true,
         cost_usd = 0.0002004, output_json = '{"verdict":"ok","n":[1,2]}'::jsonb where id = $1`,
      [job.id],
    );
    const view = (await api.call<{ job: JobView }>("GET", `/v1/jobs/${job.id}`)).body.job;
    expect(view.usage).toEqual({
      prompt_tokens: 1200,
      completion_tokens: 34,
      model_calls: 3,
      estimated: true,
      cost_usd: 0.0002004,
      // Rows written by hand reserve nothing (a host adds each call's reservation with its usage).
      reserved_usd: 0,
    });
    expect(view.output_json).toEqual({ verdict: "ok", n: [1, 2] });
  });

  it("GET /v1/models lists only the models this tenant may use", async () => {
    const dev = await api.call<{ models: { name: string; default: boolean }[] }>("GET", "/v1/models");
    expect(dev.body.models.map((m) => [m.name, m.default])).toEqual([
      ["mock-model", true],
      ["big-model", false],
    ]);
    const mine = await other.call<{ models: { name: string }[] }>("GET", "/v1/models");
    expect(mine.body.models.map((m) => m.name)).toEqual(["mock-model", "other-model"]);
  });

  it("GET /v1/usage sums the tenant's model calls per UTC day and model, with spend by agent, jobs, latencies and errors", async () => {
    const job = crypto.randomUUID();
    const exec = crypto.randomUUID();
    // The cost column as hosts write it: priced calls carry theirs, big-model's are unpriced (null).
    const rows: Array<[string, string, string, number, number, boolean, string | null]> = [
      ["dev", "mock-model", "2026-03-01T00:00:00Z", 100, 10, false, "0.1"],
      ["dev", "mock-model", "2026-03-01T23:59:59.999Z", 50, 5, false, "0.2"],
      ["dev", "big-model", "2026-03-01T12:00:00Z", 7, 3, true, null],
      ["dev", "mock-model", "2026-03-02T00:00:00Z", 1, 1, false, "0.000001"],
      ["dev", "mock-model", "2026-02-28T23:59:59Z", 1000, 1000, false, "5"], // before the range
      ["dev", "mock-model", "2026-03-03T00:00:00Z", 1000, 1000, false, "5"], // after it
      ["other", "mock-model", "2026-03-01T10:00:00Z", 999, 999, false, "5"], // another tenant's
    ];
    for (const [tenant, model, at, p, c, est, cost] of rows) {
      await pool.query(
        `insert into model_usage (tenant_id, job_id, execution_id, model, prompt_tokens, completion_tokens, estimated, created_at, cost_usd)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
        [tenant, job, exec, model, p, c, est, at, cost],
      );
    }
    // The calls' job, in the range: its agent names their spend, and its facts and error are the
    // range's jobs, latencies and errors (read back through the gateway's own driver).
    await pool.query(
      `insert into jobs (id, tenant_id, input, state, agent_name, agent_version, created_at, started_at, first_output_at, finished_at, error)
       values ($1, 'dev', '{"messages":[{"role":"user","content":"x"}]}', 'failed', 'writer', 1, '2026-03-01T10:00:00Z',
               '2026-03-01T10:00:00.025Z', '2026-03-01T10:00:00.100Z', '2026-03-01T10:00:01Z', '{"code":"provider_error","message":"m"}')`,
      [job],
    );
    const r = await api.call<{ from: string; to: string; usage: unknown[] }>(
      "GET",
      "/v1/usage?from=2026-03-01&to=2026-03-02",
    );
    await pool.query("delete from jobs where id = $1", [job]);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      from: "2026-03-01",
      to: "2026-03-02",
      usage: [
        {
          day: "2026-03-01",
          model: "big-model",
          prompt_tokens: 7,
          completion_tokens: 3,
          model_calls: 1,
          estimated: true,
          cost_usd: null,
        },
        {
          day: "2026-03-01",
          model: "mock-model",
          prompt_tokens: 150,
          completion_tokens: 15,
          model_calls: 2,
          estimated: false,
          // Summed in numeric: exactly 0.3, not 0.1 + 0.2 in binary floating point.
          cost_usd: 0.3,
        },
        {
          day: "2026-03-02",
          model: "mock-model",
          prompt_tokens: 1,
          completion_tokens: 1,
          model_calls: 1,
          estimated: false,
          cost_usd: 0.000001,
        },
      ],
      daily_budget_usd: null,
      spend: [
        { day: "2026-03-01", agent: "writer", model: "big-model", model_calls: 1, cost_usd: null },
        { day: "2026-03-01", agent: "writer", model: "mock-model", model_calls: 2, cost_usd: 0.3 },
        { day: "2026-03-02", agent: "writer", model: "mock-model", model_calls: 1, cost_usd: 0.000001 },
      ],
      jobs_per_hour: [{ hour: "2026-03-01T10:00:00Z", state: "failed", jobs: 1 }],
      latency: {
        dispatch_ms: { jobs: 1, p50: 25, p95: 25, p99: 25 },
        first_output_ms: { jobs: 1, p50: 100, p95: 100, p99: 100 },
        total_ms: { jobs: 1, p50: 1000, p95: 1000, p99: 1000 },
      },
      errors: [{ code: "provider_error", jobs: 1 }],
    });
    const empty = await api.call<{ usage: unknown[] }>("GET", "/v1/usage?from=2020-01-01&to=2020-01-31");
    expect(empty.body.usage).toEqual([]);
    expect((await api.call("GET", "/v1/usage?from=2026-03-01&to=2027-03-02")).status).toBe(400);
  });

  it("a chat message runs the connection's agent (?agent=) or its own, resolved at submit, with its default priority", async () => {
    await create({ name: "chatty", model: "mock-model", instructions: "one" });
    await newVersion("chatty", { model: "big-model", instructions: "two", priority: 4 });
    const open = (conversation: string, query: string) =>
      new Promise<WebSocket>((resolve, reject) => {
        const url = `${stack.gatewayUrl.replace(/^http/, "ws")}/v1/conversations/${conversation}/ws?${query.replace(/^&/, "")}`;
        const ws = new WebSocket(url, {
          perMessageDeflate: false,
          headers: { authorization: `Bearer ${stack.apiKey}` },
        });
        ws.once("open", () => resolve(ws));
        ws.once("error", reject);
      });
    const firstFrame = (ws: WebSocket, frame: unknown) =>
      new Promise<{ type: string; job?: JobView; error?: { code: string; message: string } }>((resolve) => {
        ws.once("message", (data) => resolve(JSON.parse(String(data))));
        ws.send(JSON.stringify(frame));
      });

    const a = await open("agent-conv-a", "&agent=chatty");
    const fromConnection = await firstFrame(a, { type: "message", content: "hi", client_message_id: "m1" });
    expect(fromConnection.job?.agent).toEqual({ name: "chatty", version: 2 });
    expect(fromConnection.job?.model).toBe("big-model");
    expect(fromConnection.job?.priority).toBe(4);
    a.close();

    const b = await open("agent-conv-b", "&agent=chatty");
    const own = await firstFrame(b, { type: "message", content: "hi", client_message_id: "m1", agent: "chatty@1" });
    expect(own.job?.agent).toEqual({ name: "chatty", version: 1 });
    expect(own.job?.priority).toBe(0);
    b.close();

    const c = await open("agent-conv-c", "");
    const unknown = await firstFrame(c, { type: "message", content: "hi", client_message_id: "m1", agent: "ghost" });
    expect(unknown).toMatchObject({ type: "error", error: { code: "invalid_request" } });
    expect(unknown.error?.message).toMatch(/no agent named "ghost"/);
    const plain = await firstFrame(c, { type: "message", content: "hi", client_message_id: "m2" });
    expect(plain.job?.agent).toBeNull();
    c.close();
  });
});

/**
 * The agent and usage repositories against a real Postgres, once through plain `pg` and once
 * through the gateway's driver (neon-http via tools/bridges/pg-proxy/main.ts, which has no interactive
 * transactions: each write here is one statement). Each test starts from resetToTwoTenants, so
 * both drivers see the same empty tables; a usage row or an agent left over from the first
 * driver's run would show in the second's sums and names.
 */
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { afterAll, expect, it } from "vitest";
import { AgentDefinitionSchema } from "../../src/contracts/agent";
import {
  archiveAgent,
  createAgent,
  createAgentVersion,
  getAgentVersion,
  listAgents,
  listAgentVersions,
} from "../../src/db/agents-repo";
import { usageByDay } from "../../src/db/usage-repo";
import { type PgProxy, startPgProxy } from "../../tools/bridges/pg-proxy/main";
import { onEveryDriver } from "../helpers/db";
import { postgresTest } from "../helpers/postgres-fixture";

const test = postgresTest({ connections: 2 });
/** The file's database (a fresh one of the migrated template). */
let dbUrl: string;
let proxy: PgProxy;
let admin: pg.Pool;

test.beforeAll(async ({ testDb }) => {
  dbUrl = testDb.url;
  admin = testDb.pool;
  proxy = await startPgProxy({ databaseUrl: dbUrl });
});

afterAll(async () => {
  await proxy?.close();
});

const definition = (fields: Record<string, unknown>) => AgentDefinitionSchema.parse({ model: "m1", ...fields });

onEveryDriver(
  "agents and usage",
  () => ({ admin, postgresUrl: dbUrl, proxyUrl: proxy.url }),
  (db) => {
    it("creates version 1 once per tenant and name, numbers the next versions, keeps each as stored", async () => {
      const created = await createAgent(db(), "t1", "a1", definition({ instructions: "one" }));
      expect(created?.view).toMatchObject({ name: "a1", version: 1, latest_version: 1, instructions: "one" });
      expect(await createAgent(db(), "t1", "a1", definition({}))).toBeNull();
      // Another tenant's name space is its own.
      expect((await createAgent(db(), "t2", "a1", definition({ model: "m2" })))?.view.version).toBe(1);

      const v2 = await createAgentVersion(db(), "t1", "a1", definition({ instructions: "two", tools: ["shell"] }));
      expect("ok" in v2 && v2.ok.view).toMatchObject({ version: 2, latest_version: 2, tools: ["shell"] });
      expect(await createAgentVersion(db(), "t1", "nope", definition({}))).toEqual({ missing: true });

      expect((await getAgentVersion(db(), "t1", "a1", null))?.view.instructions).toBe("two");
      const v1 = await getAgentVersion(db(), "t1", "a1", 1);
      expect(v1?.definition).toEqual(definition({ instructions: "one" }));
      expect(v1?.view).toMatchObject({ version: 1, latest_version: 2, archived_at: null });
      expect(await getAgentVersion(db(), "t1", "a1", 3)).toBeNull();
      expect((await getAgentVersion(db(), "t2", "a1", null))?.view.model).toBe("m2");
      expect(await getAgentVersion(db(), "t2", "a1", 2)).toBeNull();
    });

    it("archives once (the first time stays), then refuses versions and leaves the list", async () => {
      await createAgent(db(), "t1", "keep", definition({}));
      await createAgent(db(), "t1", "gone", definition({}));
      const first = await archiveAgent(db(), "t1", "gone");
      expect(first?.archived).toBe(true);
      expect((await archiveAgent(db(), "t1", "gone"))?.view.archived_at).toBe(first?.view.archived_at);
      expect(await archiveAgent(db(), "t1", "missing")).toBeNull();
      expect(await createAgentVersion(db(), "t1", "gone", definition({}))).toEqual({ archived: true });
      expect((await getAgentVersion(db(), "t1", "gone", 1))?.archived).toBe(true);
      const page = await listAgents(db(), "t1", { limit: 10 });
      expect(page.agents.map((a) => a.name)).toEqual(["keep"]);
    });

    it("pages agents by name and versions newest first", async () => {
      for (const name of ["c", "a", "b"]) await createAgent(db(), "t1", name, definition({}));
      for (let i = 0; i < 3; i++) await createAgentVersion(db(), "t1", "b", definition({ instructions: `v${i + 2}` }));
      const first = await listAgents(db(), "t1", { limit: 2 });
      expect([first.agents.map((a) => [a.name, a.version]), first.more]).toEqual([
        [
          ["a", 1],
          ["b", 4],
        ],
        true,
      ]);
      const rest = await listAgents(db(), "t1", { limit: 2, after: first.last ?? undefined });
      expect([rest.agents.map((a) => a.name), rest.more]).toEqual([["c"], false]);

      const v = await listAgentVersions(db(), "t1", "b", { limit: 3 });
      expect(v?.versions.map((x) => x.version)).toEqual([4, 3, 2]);
      expect(v?.more).toBe(true);
      expect(
        (await listAgentVersions(db(), "t1", "b", { limit: 3, before: 2 }))?.versions.map((x) => x.version),
      ).toEqual([1]);
      expect(await listAgentVersions(db(), "t1", "b", { limit: 3, before: 1 })).toEqual({ versions: [], more: false });
      expect(await listAgentVersions(db(), "t1", "zzz", { limit: 3 })).toBeNull();
      expect(await listAgentVersions(db(), "t2", "b", { limit: 3, before: 1 })).toBeNull();
    });

    it("sums usage per UTC day and model, for the tenant and the range only", async () => {
      const job = randomUUID();
      const rows: Array<[string, string, string, number, number, boolean]> = [
        ["t1", "m1", "2026-05-01T00:00:00Z", 10, 1, false],
        ["t1", "m1", "2026-05-01T23:59:59.999Z", 20, 2, true],
        ["t1", "m2", "2026-05-01T10:00:00Z", 3, 3, false],
        ["t1", "m1", "2026-05-02T00:00:00Z", 4, 4, false],
        ["t1", "m1", "2026-04-30T23:59:59.999Z", 999, 999, false],
        ["t2", "m1", "2026-05-01T10:00:00Z", 999, 999, false],
      ];
      for (const [tenant, model, at, p, c, est] of rows) {
        await admin.query(
          `insert into model_usage (tenant_id, job_id, execution_id, model, prompt_tokens, completion_tokens, estimated, created_at)
           values ($1, $2, $3, $4, $5, $6, $7, $8)`,
          [tenant, job, randomUUID(), model, p, c, est, at],
        );
      }
      expect(await usageByDay(db(), "t1", "2026-05-01", "2026-05-02")).toEqual([
        {
          day: "2026-05-01",
          model: "m1",
          prompt_tokens: 30,
          completion_tokens: 3,
          model_calls: 2,
          estimated: true,
          cost_usd: null,
        },
        {
          day: "2026-05-01",
          model: "m2",
          prompt_tokens: 3,
          completion_tokens: 3,
          model_calls: 1,
          estimated: false,
          cost_usd: null,
        },
        {
          day: "2026-05-02",
          model: "m1",
          prompt_tokens: 4,
          completion_tokens: 4,
          model_calls: 1,
          estimated: false,
          cost_usd: null,
        },
      ]);
      // Sums past 2^31 come back exact (bigint from both drivers).
      await admin.query(
        `insert into model_usage (tenant_id, job_id, execution_id, model, prompt_tokens, completion_tokens, created_at)
         select 't1', $1, $2, 'big', 2000000000, 0, '2026-06-01T00:00:00Z' from generate_series(1, 3)`,
        [job, randomUUID()],
      );
      expect(await usageByDay(db(), "t1", "2026-06-01", "2026-06-01")).toEqual([
        {
          day: "2026-06-01",
          model: "big",
          prompt_tokens: 6_000_000_000,
          completion_tokens: 0,
          model_calls: 3,
          estimated: false,
          cost_usd: null,
        },
      ]);
    });
  },
);

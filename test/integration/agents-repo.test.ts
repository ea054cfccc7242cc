/**
 * The agent and usage repositories against a real Postgres, once through plain `pg` and once
 * through the gateway's driver (neon-http via tools/bridges/pg-proxy/main.ts, which has no interactive
 * transactions: each write here is one statement). Each test starts from resetToTwoTenants, so
 * both drivers see the same empty tables; a usage row or an agent left over from the first
 * driver's run would show in the second's sums and names.
 */
import { randomUUID } from "node:crypto";
import { expect, it } from "vitest";
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
import { onEveryDriver } from "../helpers/db";
import { proxiedPostgres } from "../helpers/pg-proxy-fixture";

/** The file's database (a fresh one of the migrated template) and the proxy in front of it. */
const target = proxiedPostgres({ connections: 2 });

/**
 * Run `burst` with every version insert taking 20 ms longer (a trigger of this test's own), so
 * that concurrent creates overlap for certain: a statement checked and inserted in well under a
 * millisecond here, and a burst of them mostly ran one after another even without the lock that
 * makes the caps exact.
 */
async function slowVersionInserts<T>(burst: () => Promise<T>): Promise<T> {
  await target.admin.query(`
    CREATE OR REPLACE FUNCTION test_slow_insert() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN PERFORM pg_sleep(0.02); RETURN NEW; END $$;
    CREATE TRIGGER test_slow_insert BEFORE INSERT ON agent_versions FOR EACH ROW EXECUTE FUNCTION test_slow_insert();`);
  try {
    return await burst();
  } finally {
    await target.admin.query("DROP TRIGGER test_slow_insert ON agent_versions; DROP FUNCTION test_slow_insert();");
  }
}

/** No caps (0 turns each off): these tests are about versions, not limits. */
const NO_CAPS = { maxAgents: 0, maxVersions: 0, maxBytes: 0 };

const definition = (fields: Record<string, unknown>) => AgentDefinitionSchema.parse({ model: "m1", ...fields });

onEveryDriver(
  "agents and usage",
  () => target,
  (db) => {
    it("creates version 1 once per tenant and name, numbers the next versions, keeps each as stored", async () => {
      const created = await createAgent(db(), "t1", "a1", definition({ instructions: "one" }), NO_CAPS);
      expect("ok" in created && created.ok.view).toMatchObject({
        name: "a1",
        version: 1,
        latest_version: 1,
        instructions: "one",
      });
      expect(await createAgent(db(), "t1", "a1", definition({}), NO_CAPS)).toEqual({ exists: true });
      // Another tenant's name space is its own.
      const other = await createAgent(db(), "t2", "a1", definition({ model: "m2" }), NO_CAPS);
      expect("ok" in other && other.ok.view.version).toBe(1);

      const v2 = await createAgentVersion(
        db(),
        "t1",
        "a1",
        definition({ instructions: "two", tools: ["shell"] }),
        NO_CAPS,
      );
      expect("ok" in v2 && v2.ok.view).toMatchObject({ version: 2, latest_version: 2, tools: ["shell"] });
      expect(await createAgentVersion(db(), "t1", "nope", definition({}), NO_CAPS)).toEqual({ missing: true });

      expect((await getAgentVersion(db(), "t1", "a1", null))?.view.instructions).toBe("two");
      const v1 = await getAgentVersion(db(), "t1", "a1", 1);
      expect(v1?.definition).toEqual(definition({ instructions: "one" }));
      expect(v1?.view).toMatchObject({ version: 1, latest_version: 2, archived_at: null });
      expect(await getAgentVersion(db(), "t1", "a1", 3)).toBeNull();
      expect((await getAgentVersion(db(), "t2", "a1", null))?.view.model).toBe("m2");
      expect(await getAgentVersion(db(), "t2", "a1", 2)).toBeNull();
    });

    it("archives once (the first time stays), then refuses versions and leaves the list", async () => {
      await createAgent(db(), "t1", "keep", definition({}), NO_CAPS);
      await createAgent(db(), "t1", "gone", definition({}), NO_CAPS);
      const first = await archiveAgent(db(), "t1", "gone");
      expect(first?.archived).toBe(true);
      expect((await archiveAgent(db(), "t1", "gone"))?.view.archived_at).toBe(first?.view.archived_at);
      expect(await archiveAgent(db(), "t1", "missing")).toBeNull();
      expect(await createAgentVersion(db(), "t1", "gone", definition({}), NO_CAPS)).toEqual({ archived: true });
      expect((await getAgentVersion(db(), "t1", "gone", 1))?.archived).toBe(true);
      const page = await listAgents(db(), "t1", { limit: 10 });
      expect(page.agents.map((a) => a.name)).toEqual(["keep"]);
    });

    it("pages agents by name and versions newest first", async () => {
      for (const name of ["c", "a", "b"]) await createAgent(db(), "t1", name, definition({}), NO_CAPS);
      for (let i = 0; i < 3; i++)
        await createAgentVersion(db(), "t1", "b", definition({ instructions: `v${i + 2}` }), NO_CAPS);
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

    it("caps a tenant's agents exactly, however many creates arrive at once; a taken name is still a conflict", async () => {
      const caps = { maxAgents: 5, maxVersions: 0, maxBytes: 0 };
      const burst = await slowVersionInserts(() =>
        Promise.all(Array.from({ length: 30 }, (_, i) => createAgent(db(), "t1", `a${i}`, definition({}), caps))),
      );
      expect(burst.filter((r) => "ok" in r)).toHaveLength(5);
      expect(burst.filter((r) => "limit" in r)).toEqual(Array(25).fill({ limit: "agents" }));
      const { rows } = await target.admin.query(
        "select (select count(*)::int from agents where tenant_id = 't1') as n, agent_count from tenants where id = 't1'",
      );
      expect(rows[0]).toEqual({ n: 5, agent_count: 5 });
      // At the cap, a name already taken answers as taken; another tenant has a cap of its own.
      const taken = burst.find((r) => "ok" in r);
      const takenName = taken && "ok" in taken ? taken.ok.view.name : "";
      expect(await createAgent(db(), "t1", takenName, definition({}), caps)).toEqual({ exists: true });
      expect("ok" in (await createAgent(db(), "t2", "a0", definition({}), caps))).toBe(true);
    });

    it("caps versions per agent exactly under a burst of 200 new versions of 60 KB", async () => {
      const caps = { maxAgents: 0, maxVersions: 100, maxBytes: 0 };
      await createAgent(db(), "t1", "busy", definition({}), caps);
      const big = "x".repeat(60_000);
      const started = Date.now();
      const burst = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          createAgentVersion(db(), "t1", "busy", definition({ instructions: `${i} ${big}` }), caps),
        ),
      );
      const ok = burst.flatMap((r) => ("ok" in r ? [r.ok.view.version] : []));
      expect(ok.sort((a, b) => a - b)).toEqual(Array.from({ length: 99 }, (_, i) => i + 2));
      expect(burst.filter((r) => "limit" in r)).toEqual(Array(101).fill({ limit: "versions" }));
      console.log(`200 versions of 60 KB at once: 99 stored, 101 refused in ${Date.now() - started} ms`);
      expect((await getAgentVersion(db(), "t1", "busy", null))?.view.latest_version).toBe(100);
    });

    it("caps a tenant's definition bytes exactly: the counter is what is stored, and a burst stays under it", async () => {
      // Every definition the same size (two-digit numbers), so that exactly 10 fit under the cap.
      const big = (i: number) => definition({ instructions: `${String(i).padStart(2, "0")} ${"y".repeat(20_000)}` });
      const stored = async () =>
        (
          await target.admin.query(
            "select (select sum(octet_length(definition::text))::int from agent_versions where tenant_id = 't1') as sum, agent_bytes::int as counter from tenants where id = 't1'",
          )
        ).rows[0] as { sum: number; counter: number };
      // One definition's stored size, to set a cap that fits exactly 10 of them.
      const first = await createAgent(db(), "t1", "b0", big(0), { maxAgents: 0, maxVersions: 0, maxBytes: 0 });
      expect("ok" in first).toBe(true);
      const one = (await stored()).sum;
      const caps = { maxAgents: 0, maxVersions: 0, maxBytes: one * 10 + 5 };
      const burst = await slowVersionInserts(() =>
        Promise.all([
          ...Array.from({ length: 12 }, (_, i) => createAgentVersion(db(), "t1", "b0", big(i + 1), caps)),
          ...Array.from({ length: 12 }, (_, i) => createAgent(db(), "t1", `b${i + 1}`, big(i + 20), caps)),
        ]),
      );
      expect(burst.filter((r) => "ok" in r)).toHaveLength(9);
      expect(burst.filter((r) => "limit" in r)).toEqual(Array(15).fill({ limit: "bytes" }));
      const after = await stored();
      expect(after.counter).toBe(after.sum);
      expect(after.sum).toBeLessThanOrEqual(caps.maxBytes);
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
        await target.admin.query(
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
      await target.admin.query(
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

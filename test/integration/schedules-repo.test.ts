/**
 * Firing schedule ticks (src/db/schedules-repo.ts `fireDueSchedules`) against a real Postgres,
 * through both drivers that fire them (node-postgres: the hosts' tickers; neon-http through
 * tools/bridges/pg-proxy/main.ts: the Worker's cron): the due read is fair across tenants, a
 * schedule whose clock cannot be read (a timezone stored before the check refused it) is pushed
 * back with a growing delay and says why in `last_error`, and the next tick that fires clears it.
 * Then the hostile tenant's scenario with two real tickers: a hundred and more such schedules of
 * one tenant do not stop another tenant's `*\/2` schedule.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import { beforeAll, describe, expect, it } from "vitest";
import { ScheduleTicker } from "../../sandbox-host/scheduler/schedule-ticker";
import type { Db } from "../../src/db/client";
import { createSchedule, fireDueSchedules, getSchedule, updateSchedule } from "../../src/db/schedules-repo";
import * as schema from "../../src/db/schema";
import type { AdmissionRules } from "../../src/domain/job-admission";
import { nextTick } from "../../src/domain/schedule-time";
import { onEveryDriver, resetToTwoTenants } from "../helpers/db";
import { proxiedPostgres } from "../helpers/pg-proxy-fixture";

/** Job admission with nothing to refuse (no model list, no queued-jobs cap): these tests are about firing. */
const ADMIT_ALL: AdmissionRules = { models: { entries: [] }, maxQueued: 0 };

/** The file's database (a fresh one of the migrated template) and the proxy in front of it. */
const target = proxiedPostgres({ connections: 4 });

const INPUT = JSON.stringify({ messages: [{ role: "user", content: "tick" }] });

/**
 * Schedules inserted as a row, the way the gateway stored them before its checks (or as a hostile
 * tenant got them stored): one per zone, all with `cron`, due `agoMs` ago or a few ms more, the
 * first in the list the most overdue. Their ticks have microseconds (the gateway and the firers
 * write whole milliseconds): a firer must still fire them. Returns their ids in order.
 */
async function insertRows(tenant: string, cron: string, zones: string[], agoMs: number): Promise<string[]> {
  const r = await target.admin.query<{ id: string }>(
    `INSERT INTO schedules (id, tenant_id, cron, timezone, input, next_run_at)
     SELECT gen_random_uuid(), $1, $2, z, $3::jsonb,
       now() - ($4::int + (count - i)::int) * interval '1 millisecond'
     FROM unnest($5::text[]) WITH ORDINALITY AS u(z, i), (SELECT cardinality($5::text[]) AS count) c
     RETURNING id`,
    [tenant, cron, INPUT, agoMs, zones],
  );
  return r.rows.map((x) => x.id);
}

async function row(id: string) {
  const r = await target.admin.query<{
    failures: number;
    last_error: string | null;
    retry_in_ms: number | null;
    next_run_at: Date | null;
  }>(
    `SELECT failures, last_error, next_run_at,
       (extract(epoch FROM retry_at - now()) * 1000)::int AS retry_in_ms
     FROM schedules WHERE id = $1`,
    [id],
  );
  return r.rows[0] as NonNullable<(typeof r.rows)[0]>;
}

const jobsOf = async (scheduleId: string) =>
  (
    await target.admin.query<{ scheduled_for: Date }>(
      "SELECT scheduled_for FROM jobs WHERE schedule_id = $1 ORDER BY scheduled_for",
      [scheduleId],
    )
  ).rows.map((r) => r.scheduled_for.getTime());

onEveryDriver(
  "firing schedule ticks",
  () => target,
  (db) => {
    it("one tenant's 150 due schedules cannot keep another tenant's due tick out of a pass", async () => {
      // t1's are all more overdue than t2's one: by due time alone, a batch of 100 is all t1's.
      const mine = await insertRows("t1", "0 0 1 1 *", Array(150).fill("UTC"), 3_600_000);
      const [theirs] = await insertRows("t2", "0 0 1 1 *", ["UTC"], 1000);
      const { fired } = await fireDueSchedules(db(), ADMIT_ALL);
      const ids = new Set(fired.map((f) => f.scheduleId));
      console.log(
        `one pass: t2's due tick fired ${ids.has(theirs as string) ? 1 : 0}/1 beside t1's 150 due; ticks fired ${fired.length}`,
      );
      expect(ids.has(theirs as string)).toBe(true);
      expect(await jobsOf(theirs as string)).toHaveLength(1);
      // Fair is not slower: the batch is still full, and t1's most overdue went first.
      expect(fired).toHaveLength(100);
      expect(ids.has(mine[0] as string)).toBe(true);
      // The rest of t1's are the next pass's.
      expect((await fireDueSchedules(db(), ADMIT_ALL)).fired).toHaveLength(51);
    });

    it("a schedule whose timezone the firer refuses is pushed back by a growing delay with last_error, and a tick that fires clears it", async () => {
      const [broken] = await insertRows("t1", "* * * * * *", ["Factory"], 5000);
      const [offset] = await insertRows("t1", "* * * * * *", ["+05:30"], 5000);
      const id = broken as string;
      const warnings: Array<Record<string, unknown>> = [];
      const log = { warn: (_msg: string, fields?: Record<string, unknown>) => warnings.push(fields ?? {}) };

      expect((await fireDueSchedules(db(), ADMIT_ALL, log)).fired).toEqual([]);
      const first = await row(id);
      expect(first.failures).toBe(1);
      expect(first.last_error).toMatch(/^timezone: "Factory" is not an IANA timezone/);
      expect(first.retry_in_ms).toBeGreaterThan(1000);
      expect(first.retry_in_ms).toBeLessThanOrEqual(2000);
      expect((await row(offset as string)).last_error).toMatch(/"\+05:30" is not an IANA timezone.*UTC offset/);
      expect(warnings.map((w) => w.schedule_id).sort()).toEqual([broken, offset].sort());
      // The tenant sees why on the schedule.
      expect((await getSchedule(db(), "t1", id))?.last_error).toBe(first.last_error);

      // Within the delay it is not read at all: no second failure, no statement for it.
      const again = await fireDueSchedules(db(), ADMIT_ALL, log);
      expect(again.fired).toEqual([]);
      expect((await row(id)).failures).toBe(1);
      expect(warnings).toHaveLength(2);
      // The soonest thing ahead is its retry: a ticker sleeps until then.
      expect(again.nextInMs).toBeGreaterThan(0);
      expect(again.nextInMs).toBeLessThanOrEqual(2000);

      // Its delay over, it fails again and waits twice as long.
      await target.admin.query("UPDATE schedules SET retry_at = now() - interval '1 millisecond' WHERE id = $1", [id]);
      await fireDueSchedules(db(), ADMIT_ALL, log);
      const second = await row(id);
      expect(second.failures).toBe(2);
      expect(second.retry_in_ms).toBeGreaterThan(3000);
      expect(second.retry_in_ms).toBeLessThanOrEqual(4000);
      expect(second.next_run_at).toEqual(first.next_run_at);

      // Once its clock reads (the zone put right in the row, the delay over), the owed tick fires
      // and the failure is forgotten.
      await target.admin.query(
        "UPDATE schedules SET timezone = 'UTC', retry_at = now() - interval '1 millisecond' WHERE id = $1",
        [id],
      );
      const { fired } = await fireDueSchedules(db(), ADMIT_ALL, log);
      expect(fired.map((f) => f.scheduleId)).toContain(id);
      expect(await row(id)).toMatchObject({ failures: 0, last_error: null, retry_in_ms: null });
      expect((await getSchedule(db(), "t1", id))?.last_error).toBeNull();
    });

    it("a new next tick (PATCH of cron, timezone or enabled) ends a retry delay; other changes keep it", async () => {
      const [id] = (await insertRows("t1", "* * * * * *", ["Factory"], 5000)) as [string];
      // As the gateway writes a tick (the view, which a PATCH starts from, shows milliseconds).
      await target.admin.query(
        "UPDATE schedules SET next_run_at = date_trunc('milliseconds', next_run_at) WHERE id = $1",
        [id],
      );
      await fireDueSchedules(db(), ADMIT_ALL);
      const view = await getSchedule(db(), "t1", id);
      if (!view) throw new Error("schedule gone");
      const fields = {
        cron: view.cron,
        timezone: view.timezone,
        input: view.input,
        metadata: { changed: true },
        enabled: true,
        catchUp: "latest" as const,
      };
      // Metadata only: the same next tick, the delay stays.
      await updateSchedule(db(), "t1", id, { ...fields, nextRunAt: new Date(view.next_run_at as string) });
      expect((await row(id)).failures).toBe(1);
      expect((await row(id)).retry_in_ms).toBeGreaterThan(0);
      const next = nextTick("* * * * * *", "UTC", new Date()) as Date;
      await updateSchedule(db(), "t1", id, { ...fields, timezone: "UTC", nextRunAt: next });
      // last_error stays until a tick fires: it is the last error there was.
      expect(await row(id)).toMatchObject({ failures: 0, retry_in_ms: null });
      expect((await row(id)).last_error).toMatch(/Factory/);
    });
  },
);

describe("a hostile tenant's schedules in zones no firer reads", () => {
  let db: Db;
  beforeAll(async () => {
    db = drizzle({ client: target.admin, schema }) as unknown as Db;
    await resetToTwoTenants(target.admin, db);
  });

  it("110 of tenant A's due schedules that cannot fire do not stop tenant B's */2 schedule on two tickers", async () => {
    // A's rows as the gateway stored them before its check: zones workerd takes and Node refuses
    // (Factory, on every Node) or that one Node takes and another refuses (the offsets).
    const offsets = ["+05:30", "-00:00", "+0530"];
    const zones = Array.from({ length: 110 }, (_, i) => (i < 100 ? "Factory" : (offsets[i % 3] as string)));
    const hostile = await insertRows("t1", "* * * * * *", zones, 60_000);
    const cron = "*/2 * * * * *";
    const victim = await createSchedule(
      db,
      "t2",
      {
        cron,
        timezone: "UTC",
        agent: null,
        input: { messages: [{ role: "user", content: "on time" }] },
        metadata: {},
        enabled: true,
        catchUp: "latest",
        nextRunAt: nextTick(cron, "UTC", new Date()),
      },
      100,
    );
    if (!victim) throw new Error("not created");
    const start = Date.now();
    const warns: string[] = [];
    const log = {
      info() {},
      warn: (msg: string) => warns.push(msg),
      error() {},
    };
    const tickers = [0, 1].map(() => new ScheduleTicker({ db, log, maxWaitMs: 1000, admission: ADMIT_ALL }));
    for (const t of tickers) t.start();
    await new Promise((r) => setTimeout(r, 12_000));
    await Promise.all(tickers.map((t) => t.stop()));
    const end = Date.now();

    // Every */2 tick from B's first to one a second before the end (a later one may be in flight).
    const expected: number[] = [];
    for (let t = nextTick(cron, "UTC", new Date(start)); t && t.getTime() <= end - 1000; t = nextTick(cron, "UTC", t)) {
      expected.push(t.getTime());
    }
    const made = (await jobsOf(victim.id)).filter((ms) => ms <= end - 1000);
    console.log(
      `tenant B's */2 ticks fired ${made.length}/${expected.length} beside tenant A's ${hostile.length} unfireable schedules (two tickers, 12 s)`,
    );
    expect(made).toEqual(expected);
    const tries = await target.admin.query<{ failures: string; max: number }>(
      "SELECT sum(failures) AS failures, max(failures) AS max FROM schedules WHERE id = ANY($1::uuid[])",
      [hostile],
    );
    console.log(`tenant A's failed tries ${tries.rows[0]?.failures} (at most ${tries.rows[0]?.max} per schedule)`);
    // Each of A's rows was tried a few times in 12 s (delays 2, 4, 8 s), not at every pass.
    expect(Number(tries.rows[0]?.max)).toBeLessThanOrEqual(4);
    const errors = await target.admin.query<{ last_error: string | null }>(
      "SELECT DISTINCT last_error FROM schedules WHERE id = ANY($1::uuid[])",
      [hostile],
    );
    for (const e of errors.rows) expect(e.last_error).toMatch(/^timezone: ".*" is not an IANA timezone/);
    expect((await getSchedule(db, "t2", victim.id))?.last_error).toBeNull();
    expect(warns.every((w) => w.startsWith("schedule tick not fired"))).toBe(true);
  }, 60_000);
});

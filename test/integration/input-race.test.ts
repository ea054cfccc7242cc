import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import { ApiError } from "../../src/contracts/errors";
import { LIMITS } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import { submitInput } from "../../src/db/control-repo";
import { createNeonHttpDb } from "../../src/db/neon-http";
import * as schema from "../../src/db/schema";
import { proxiedPostgres } from "../helpers/pg-proxy-fixture";
import { newJob } from "../helpers/postgres-fixture";

const ROUNDS = 4;
/** Connections the node-postgres burst runs on: enough that every request of a burst is in flight. */
const CONNECTIONS = 40;

/** The file's database (a fresh one of the migrated template) and the proxy in front of it. */
const target = proxiedPostgres({ connections: CONNECTIONS, tenants: ["t1"] });

type Outcome = { key: string; inputId: string; created: boolean } | { key: string; refused: true };

/** Every call at once; also reports how many were in flight together at most. */
async function burst(
  db: Db,
  jobId: string,
  calls: Array<{ key: string; content: string }>,
): Promise<{ outcomes: Outcome[]; maxInFlight: number }> {
  let inFlight = 0;
  let maxInFlight = 0;
  const outcomes = await Promise.all(
    calls.map(async ({ key, content }): Promise<Outcome> => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        const r = await submitInput(db, "t1", jobId, content, key);
        if (!r) throw new Error(`job ${jobId} not found`);
        return { key, inputId: r.inputId, created: r.created };
      } catch (err) {
        if (err instanceof ApiError && err.code === "input_limit_reached") return { key, refused: true };
        throw err;
      } finally {
        inFlight--;
      }
    }),
  );
  return { outcomes, maxInFlight };
}

/** What job_inputs holds for the job, checked against the row's own counters (no drift from racing retries). */
async function stored(jobId: string): Promise<{ n: number; bytes: number }> {
  const { rows } = await target.admin.query(
    `select count(i.id)::int as n, coalesce(sum(octet_length(i.content)), 0)::int as bytes,
       j.input_count as counted_n, j.input_bytes::int as counted_bytes
     from jobs j left join job_inputs i on i.job_id = j.id where j.id = $1 group by j.id`,
    [jobId],
  );
  const [r] = rows;
  expect({ n: r.counted_n, bytes: r.counted_bytes }).toEqual({ n: r.n, bytes: r.bytes });
  return { n: r.n, bytes: r.bytes };
}

const drivers: Array<[string, () => Db]> = [
  ["node-postgres", () => drizzle({ client: target.admin, schema }) as unknown as Db],
  [
    "neon-http via pg-proxy",
    () => createNeonHttpDb({ connectionString: target.postgresUrl, fetchEndpoint: `${target.proxyUrl}/sql` }),
  ],
];

describe.each(drivers)("input caps under concurrency: %s", (driver, getDb) => {
  it(`150 inputs at once store exactly ${LIMITS.maxInputsPerJob}; every retry of a stored one is answered`, async () => {
    const db = getDb();
    for (let round = 1; round <= ROUNDS; round++) {
      const jobId = await newJob(db);
      // 140 distinct keys, 10 of them sent twice in the same burst: a retry racing its first send.
      const calls = Array.from({ length: 150 }, (_, i) => {
        const k = i < 140 ? i : i - 140;
        return { key: `k${k}`, content: `input ${k}` };
      });
      const { outcomes, maxInFlight } = await burst(db, jobId, calls);
      const s = await stored(jobId);
      console.log(
        `[${driver}] round ${round}: ${s.n} inputs stored (limit ${LIMITS.maxInputsPerJob}), ${maxInFlight} in flight`,
      );
      expect(maxInFlight).toBeGreaterThan(100);
      expect(s.n).toBe(LIMITS.maxInputsPerJob);
      const created = outcomes.filter((o) => "created" in o && o.created);
      expect(created).toHaveLength(LIMITS.maxInputsPerJob);
      // A key answered twice names one input; a key whose input is stored is never refused.
      const byKey = new Map<string, Outcome[]>();
      for (const o of outcomes) byKey.set(o.key, [...(byKey.get(o.key) ?? []), o]);
      for (const [key, answers] of byKey) {
        const ids = new Set(answers.flatMap((a) => ("inputId" in a ? [a.inputId] : [])));
        expect(ids.size, key).toBeLessThanOrEqual(1);
      }
      // After the burst, at the cap: a retry of each stored input is still its input.
      const storedKeys = await target.admin.query("select idempotency_key, id from job_inputs where job_id = $1", [
        jobId,
      ]);
      for (const row of storedKeys.rows.slice(0, 10)) {
        const again = await submitInput(db, "t1", jobId, `input ${row.idempotency_key.slice(1)}`, row.idempotency_key);
        expect(again).toMatchObject({ created: false, inputId: row.id });
      }
    }
  }, 120_000);

  it(`40 × 60,000 bytes at once store at most ${LIMITS.maxInputBytesPerJob} bytes`, async () => {
    const db = getDb();
    const size = 60_000;
    const fits = Math.floor(LIMITS.maxInputBytesPerJob / size);
    for (let round = 1; round <= ROUNDS; round++) {
      const jobId = await newJob(db);
      const calls = Array.from({ length: 40 }, (_, i) => ({ key: `b${i}`, content: String(i).padEnd(size, "x") }));
      const { outcomes, maxInFlight } = await burst(db, jobId, calls);
      const s = await stored(jobId);
      console.log(
        `[${driver}] round ${round}: ${s.bytes} bytes in ${s.n} inputs stored (limit ${LIMITS.maxInputBytesPerJob}), ${maxInFlight} in flight`,
      );
      expect(maxInFlight).toBeGreaterThan(fits);
      expect(s.bytes).toBeLessThanOrEqual(LIMITS.maxInputBytesPerJob);
      expect(s.n).toBe(fits);
      expect(outcomes.filter((o) => "refused" in o)).toHaveLength(40 - fits);
    }
  }, 120_000);
});

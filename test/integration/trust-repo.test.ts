/**
 * Trust boundaries at the repository layer, against a real Postgres, once through plain `pg` and
 * once through the gateway's driver (neon-http via tools/bridges/pg-proxy/main.ts): idempotency keys are bound
 * to their request, inputs per job are capped, keys are revoked by their unique id, a tenant
 * never sees an internal error's detail, logs of a failed query carry no values, and the proxy
 * checks the password.
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { promisify } from "node:util";
import { NeonDbError, neon } from "@neondatabase/serverless";
import { sql } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { createLogger, errorFields } from "../../sandbox-host/log";
import { ApiError } from "../../src/contracts/errors";
import { type CreateJobBody, LIMITS } from "../../src/contracts/job";
import { submitInput } from "../../src/db/control-repo";
import { toJobView } from "../../src/db/job-view";
import { createJob, findTenantIdByKeyHash } from "../../src/db/jobs-repo";
import * as schema from "../../src/db/schema";
import { listApiKeys, revokeApiKey } from "../../src/db/tenants-repo";
import { loggableError } from "../../workers/log";
import { caught } from "../helpers/caught";
import { onEveryDriver } from "../helpers/db";
import { proxiedPostgres } from "../helpers/pg-proxy-fixture";

/** The file's database (a fresh one of the migrated template) and the proxy in front of it. */
const target = proxiedPostgres({ connections: 2 });

const body = (content: string, extra: Partial<CreateJobBody> = {}): CreateJobBody => ({
  input: { messages: [{ role: "user", content }] },
  ...extra,
});

onEveryDriver(
  "trust boundaries",
  () => target,
  (db) => {
    it("the same idempotency key with the same request is the same job; with another request it is 409", async () => {
      const first = await createJob(
        db(),
        "t1",
        randomUUID(),
        body("hello", { idempotency_key: "k", metadata: { a: 1, b: { c: 2, d: 3 } } }),
      );
      expect(first.created).toBe(true);
      // Key order in metadata and spelled-out defaults do not make a different request.
      const same = await createJob(
        db(),
        "t1",
        randomUUID(),
        body("hello", { idempotency_key: "k", tools: [], metadata: { b: { d: 3, c: 2 }, a: 1 } }),
      );
      expect(same).toMatchObject({ created: false, job: { id: first.job.id } });
      for (const other of [
        body("hello!", { idempotency_key: "k", metadata: { a: 1, b: { c: 2, d: 3 } } }),
        body("hello", { idempotency_key: "k", metadata: { a: 2, b: { c: 2, d: 3 } } }),
        body("hello", { idempotency_key: "k", model: "m2", metadata: { a: 1, b: { c: 2, d: 3 } } }),
        body("hello", { idempotency_key: "k", tools: ["shell"], metadata: { a: 1, b: { c: 2, d: 3 } } }),
      ]) {
        const err = await caught(createJob(db(), "t1", randomUUID(), other));
        expect(err).toBeInstanceOf(ApiError);
        expect(err).toMatchObject({ code: "idempotency_mismatch", status: 409 });
      }
      // Another tenant's same key is its own.
      expect((await createJob(db(), "t2", randomUUID(), body("other", { idempotency_key: "k" }))).created).toBe(true);
      // A job stored before request hashes existed matches any body (its request is unknown).
      await target.admin.query("update jobs set request_hash = null where id = $1", [first.job.id]);
      const legacy = await createJob(db(), "t1", randomUUID(), body("anything", { idempotency_key: "k" }));
      expect(legacy).toMatchObject({ created: false, job: { id: first.job.id } });
    });

    it("an input's idempotency key is bound to its content", async () => {
      const { job } = await createJob(db(), "t1", randomUUID(), body("hi"));
      const first = await submitInput(db(), "t1", job.id, "more", "in-1");
      expect(first?.created).toBe(true);
      const again = await submitInput(db(), "t1", job.id, "more", "in-1");
      expect(again).toMatchObject({ created: false, inputId: first?.inputId });
      const err = await caught(submitInput(db(), "t1", job.id, "different", "in-1"));
      expect(err).toMatchObject({ code: "idempotency_mismatch", status: 409 });
      expect(await submitInput(db(), "t2", job.id, "more", "in-1")).toBeNull();
    });

    it("a job takes at most maxInputsPerJob inputs; a retry of a stored one is still answered", async () => {
      const { job } = await createJob(db(), "t1", randomUUID(), body("hi"));
      for (let i = 0; i < LIMITS.maxInputsPerJob; i++) {
        expect((await submitInput(db(), "t1", job.id, `n${i}`, `k${i}`))?.created).toBe(true);
      }
      const over = await caught(submitInput(db(), "t1", job.id, "one more", null));
      expect(over).toMatchObject({ code: "input_limit_reached", status: 409 });
      expect(await submitInput(db(), "t1", job.id, "n0", "k0")).toMatchObject({ created: false });
      const { rows } = await target.admin.query("select count(*)::int as n from job_inputs where job_id = $1", [
        job.id,
      ]);
      expect(rows[0].n).toBe(LIMITS.maxInputsPerJob);
    });

    it("a job takes at most maxInputBytesPerJob bytes of input in all", async () => {
      const { job } = await createJob(db(), "t1", randomUUID(), body("hi"));
      const chunk = "é".repeat(LIMITS.maxMessageChars / 2); // 2 UTF-8 bytes each: maxMessageChars bytes
      const fits = Math.floor(LIMITS.maxInputBytesPerJob / new TextEncoder().encode(chunk).byteLength);
      for (let i = 0; i < fits; i++) expect((await submitInput(db(), "t1", job.id, chunk, null))?.created).toBe(true);
      const over = await caught(submitInput(db(), "t1", job.id, "x".repeat(LIMITS.maxInputBytesPerJob), null));
      expect(over).toMatchObject({ code: "input_limit_reached" });
    });

    it("revoking a key by its id revokes that key only, never another tenant's key with the same prefix", async () => {
      // Prefixes are short and random: two tenants' keys can share one.
      await target.admin.query(
        `insert into api_keys (tenant_id, prefix, key_hash) values ('t1', 'ear_same', 'hash-1'), ('t2', 'ear_same', 'hash-2')`,
      );
      const [mine] = await listApiKeys(db(), "t1");
      expect(mine).toMatchObject({ prefix: "ear_same" });
      expect(await revokeApiKey(db(), "t1", mine?.id as string)).toBe(true);
      expect(await findTenantIdByKeyHash(db(), "hash-1")).toBeNull();
      expect(await findTenantIdByKeyHash(db(), "hash-2")).toBe("t2");
      // Another tenant cannot revoke t2's key by naming its id under t1, and ids are not prefixes.
      const [theirs] = await listApiKeys(db(), "t2");
      expect(await revokeApiKey(db(), "t1", theirs?.id as string)).toBe(false);
      expect(await revokeApiKey(db(), "t2", "ear_same")).toBe(false);
      expect(await findTenantIdByKeyHash(db(), "hash-2")).toBe("t2");
    });

    it("a tenant sees a generic message for an internal error; the code stays", async () => {
      const { job } = await createJob(db(), "t1", randomUUID(), body("hi"));
      const detail = "connect ECONNREFUSED 10.1.2.3:5432 at /srv/host-7/runner.js";
      await target.admin.query(
        `update jobs set state = 'failed', finished_at = now(), error = $2::jsonb where id = $1`,
        [job.id, JSON.stringify({ code: "internal_error", message: detail })],
      );
      const [row] = await db().select().from(schema.jobs).where(sql`${schema.jobs.id} = ${job.id}`);
      const view = toJobView(row as schema.JobRow);
      expect(view.error?.code).toBe("internal_error");
      expect(view.error?.message).not.toContain("10.1.2.3");
      expect(view.error?.message).not.toContain("host-7");
      // A tenant-caused failure keeps its explanation.
      const tenantCaused = { code: "too_many_turns" as const, message: "the agent used 8 model turns" };
      expect(toJobView({ ...(row as schema.JobRow), error: tenantCaused }).error).toEqual(tenantCaused);
    });

    it("a failed query's log text names the error and SQLSTATE but no value", async () => {
      const secret = `secret-${randomUUID()}`;
      const err = await caught(db().execute(sql`select ${secret}::uuid as u`));
      const text = loggableError(err);
      expect(text).toContain("22P02");
      expect(text).toContain("Failed query: select $1::uuid");
      expect(text).not.toContain(secret);
    });

    it("a host's log line for a failed write carries neither its parameters nor the value Postgres quotes", async () => {
      // What the host's `terminal write failed` line used to hold: the claim token and the output.
      const token = randomUUID();
      const output = `tenant-output-${randomUUID()}`;
      const err = await caught(db().execute(sql`select ${token}::uuid as t, ${output}::jsonb as o`));
      const lines: string[] = [];
      const hostLog = createLogger({ host: "h1" }, (l) => lines.push(l));
      hostLog.error("terminal write failed", { job_id: "j", ...errorFields(err) });
      // A caller that took the message itself gets the same cut.
      hostLog.warn("statement failed", { error: (err as Error).message });
      expect(lines).toHaveLength(2);
      for (const l of lines) {
        expect(l).not.toContain(token);
        expect(l).not.toContain(output);
      }
      expect(JSON.parse(lines[0] as string).error).toContain("Failed query: select $1::uuid");
    });
  },
);

describe("pg-proxy credentials", () => {
  it("refuses a connection string with the wrong password or user over /sql", async () => {
    const url = new URL(target.postgresUrl);
    const ok = neon(target.postgresUrl, { fullResults: false });
    expect(await ok`select 1 as one`).toEqual([{ one: 1 }]);
    for (const [user, password] of [
      [url.username, "wrong-password-123"],
      [url.username, ""],
      ["someone_else", url.password],
    ] as const) {
      const bad = new URL(target.postgresUrl);
      bad.username = user;
      bad.password = password;
      const q = neon(bad.toString(), { fullResults: false });
      const err = await caught(q`select 1 as one`);
      expect(err, `${user}:${password}`).toBeInstanceOf(NeonDbError);
      expect((err as Error).message).toMatch(/password authentication failed/);
      if (password) expect((err as Error).message).not.toContain(password);
    }
  });
});

describe("operator CLI keys", () => {
  const run = (...args: string[]) =>
    // node --import tsx, as `npm run cli` runs it: npx's own resolution added ~1 s to each of the
    // seven commands, and at load 16 the case took 53 s of its 60.
    promisify(execFile)(process.execPath, ["--import", "tsx", "tools/cli/operator.ts", ...args], {
      env: { ...process.env, DATABASE_URL: target.postgresUrl },
    }).then(
      (r) => ({ code: 0, out: r.stdout, err: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout, err: e.stderr }),
    );

  it("lists keys with their ids and revokes one by tenant and id; a prefix is not an id", async () => {
    await target.admin.query("truncate executions, jobs, api_keys, tenants cascade");
    expect((await run("tenant", "create", "cli-a")).code).toBe(0);
    const created = await run("key", "create", "cli-a");
    expect(created.code).toBe(0);
    const listed = (await run("key", "list", "cli-a")).out.trim().split("\t");
    const [id, prefix] = listed;
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.out.trim().startsWith(`ear_${prefix}_`)).toBe(true);
    expect((await run("key", "revoke", prefix as string)).code).toBe(2); // the old form is gone
    expect((await run("key", "revoke", "cli-a", prefix as string)).code).toBe(1);
    const revoked = await run("key", "revoke", "cli-a", id as string);
    expect(revoked).toMatchObject({ code: 0 });
    expect((await run("key", "list", "cli-a")).out).toMatch(/\trevoked\n?$/);
  }, 120_000);
});

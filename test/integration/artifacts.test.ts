/**
 * Artifacts end to end on the real stack: a run's files under /workspace/out/ are stored in
 * Miniflare's R2 (the gateway's BLOBS bucket, persisted in a directory this test owns) through
 * the signed upload route, listed and downloaded byte for byte with a key and a job-bound token,
 * unreachable (404) for another tenant, and collected from the bucket once their job is purged.
 */
import { createHash, randomBytes } from "node:crypto";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/node-postgres";
import { afterAll, describe, expect, it } from "vitest";
import { EarClient } from "../../src/client/client";
import { purgeFinishedJobs } from "../../src/db/retention-repo";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { signedHeaders } from "../../src/domain/signing";
import { makeOwnedTempDir, removeOwnedTempDir } from "../../tools/stack/services/temp-dirs";
import { agentJobs, apiClient } from "../helpers/api";
import { requireDocker } from "../helpers/docker";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const docker = await requireDocker();
const canRun = docker !== null && (await requireBinary("redis-server", "apt-get install redis-server"));
const r2Dir = await makeOwnedTempDir("ear-do-");

const mock = (script: object) => ({ role: "user", content: `!mock ${JSON.stringify(script)}` });

/** Every file Miniflare keeps under its R2 directory's blob folders (an object's bytes live there). */
async function r2BlobFiles(): Promise<string[]> {
  const out: string[] = [];
  async function walk(dir: string): Promise<void> {
    for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const p = join(dir, e.name);
      if (e.isDirectory()) await walk(p);
      else if (p.includes("/blobs/")) out.push(p);
    }
  }
  await walk(r2Dir);
  return out;
}

describe.skipIf(!canRun)("artifacts: files under /workspace/out/ in R2", () => {
  // BLOB_GRACE_S=0: the cron collects an unreferenced blob at once (the default spares it an hour).
  // No sleep (HOST_SLEEP_MAX_MS=0): the cron skips its tasks while the whole fleet sleeps, and this
  // test purges a job by hand, which no sleeping host hears of (docs/limits.md, "Storage").
  const t = useStack({
    hosts: 1,
    r2PersistTo: r2Dir,
    gatewayVars: { BLOB_GRACE_S: "0" },
    hostEnv: { HOST_SLEEP_MAX_MS: "0" },
  });
  afterAll(() => removeOwnedTempDir(r2Dir));
  const binary = randomBytes(40_000);
  let jobId = "";

  async function runJob(api: ReturnType<typeof apiClient>): Promise<string> {
    const r = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", {
      input: {
        messages: [
          mock({
            tool_calls: [
              {
                name: "write_file",
                args: { path: "out/sub/data.bin", content: binary.toString("base64"), encoding: "base64" },
              },
              {
                name: "shell",
                args: {
                  command:
                    "printf 'a,b\\n1,2\\n' > 'out/q1 summary.csv' && echo scratch > notes.txt && ln -s /etc/passwd out/passwd",
                },
              },
            ],
            reply: "done",
          }),
        ],
      },
      tools: ["shell", "write_file"],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    return r.body.job.id;
  }

  it("lists the run's files under /workspace/out/ and downloads each byte for byte (key, typed client, job-bound token)", async () => {
    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    jobId = await runJob(api);
    const job = await agentJobs(
      () => api,
      () => t.stack.modelName,
    ).finished(jobId);
    expect(job.state, JSON.stringify(job)).toBe("completed");

    const listed = await api.call<{ artifacts: Array<Record<string, unknown>> }>("GET", `/v1/jobs/${jobId}/artifacts`);
    expect(listed.status).toBe(200);
    const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
    // Path order; the symlink and the file outside out/ are no artifacts.
    expect(listed.body.artifacts).toEqual([
      {
        path: "q1 summary.csv",
        bytes: 8,
        sha256: sha(Buffer.from("a,b\n1,2\n")),
        content_type: "text/csv; charset=utf-8",
      },
      { path: "sub/data.bin", bytes: binary.length, sha256: sha(binary), content_type: "application/octet-stream" },
    ]);

    const raw = await fetch(`${t.stack.gatewayUrl}/v1/jobs/${jobId}/artifacts/sub/data.bin`, {
      headers: { authorization: `Bearer ${t.stack.apiKey}` },
    });
    expect(raw.status).toBe(200);
    expect(raw.headers.get("content-type")).toBe("application/octet-stream");
    expect(raw.headers.get("etag")).toBe(`"${sha(binary)}"`);
    expect(Buffer.from(await raw.arrayBuffer()).equals(binary)).toBe(true);

    const client = new EarClient({ baseUrl: t.stack.gatewayUrl, credential: t.stack.apiKey });
    expect((await client.artifacts(jobId)).artifacts.map((a) => a.path)).toEqual(["q1 summary.csv", "sub/data.bin"]);
    const csv = await client.artifact(jobId, "q1 summary.csv");
    // Blob normalizes the header's type (no space after the `;`).
    expect(csv.type).toBe("text/csv;charset=utf-8");
    expect(await csv.text()).toBe("a,b\n1,2\n");

    // A token bound to this job reads them; one bound to another job does not.
    const { token } = await new EarClient({ baseUrl: t.stack.gatewayUrl, credential: t.stack.apiKey }).createToken({
      scope: "read",
      job_id: jobId,
    });
    const viaToken = new EarClient({ baseUrl: t.stack.gatewayUrl, credential: token });
    expect(Buffer.from(await (await viaToken.artifact(jobId, "sub/data.bin")).arrayBuffer()).equals(binary)).toBe(true);

    // Not an artifact: a path it has none at, the symlink, a path escaping out/.
    for (const path of ["nope.txt", "passwd", "..%2Fnotes.txt", "sub/../../notes.txt"]) {
      const r = await api.call("GET", `/v1/jobs/${jobId}/artifacts/${path}`);
      expect(r.status, path).toBe(404);
    }
  }, 120_000);

  it("another tenant gets 404 for the job's artifacts and for each artifact", async () => {
    const pool = t.pool;
    const db = drizzle(pool, { schema });
    await createTenant(db, "artifacts-other", "another tenant");
    const { key } = await createApiKey(db, "artifacts-other", "test");
    const other = apiClient(t.stack.gatewayUrl, key);
    const list = await other.call<{ error: { code: string } }>("GET", `/v1/jobs/${jobId}/artifacts`);
    expect(list.status).toBe(404);
    expect(list.body.error.code).toBe("not_found");
    const one = await other.call<{ error: { code: string } }>("GET", `/v1/jobs/${jobId}/artifacts/sub/data.bin`);
    expect(one.status).toBe(404);
    expect(one.body.error.code).toBe("not_found");
  });

  it("the upload route refuses bytes that are not the signed address, and unsigned requests", async () => {
    const bytes = Buffer.from("not what was signed");
    const sha = "0".repeat(64);
    const path = `/internal/blobs/${t.stack.tenantId}/${sha}`;
    const forged = await fetch(`${t.stack.gatewayUrl}${path}`, {
      method: "PUT",
      headers: await signedHeaders(t.stack.signingSecret, "PUT", path, sha),
      body: bytes,
    });
    // The signature covered the claimed hash, not the bytes' own: refused as unauthorized.
    expect(forged.status).toBe(401);
    const unsigned = await fetch(`${t.stack.gatewayUrl}${path}`, { method: "PUT", body: bytes });
    expect(unsigned.status).toBe(401);
  });

  it("a purged job's blobs are collected from Postgres and from the bucket by the cron", async () => {
    const pool = t.pool;
    expect((await r2BlobFiles()).length).toBeGreaterThanOrEqual(2);
    await pool.query("UPDATE jobs SET finished_at = now() - interval '2 days' WHERE id = $1", [jobId]);
    const db = drizzle(pool, { schema });
    // The purge keeps a job whose sandbox the janitor has not yet removed (cleanup_pending) and
    // skips a row another session holds locked; on a busy machine the janitor can lag the job's
    // end by seconds, so purge until the job is gone (what the hosts' reaper does each pass).
    const deadline = Date.now() + 40_000;
    for (;;) {
      await purgeFinishedJobs(db, { olderThanMs: 86_400_000 });
      const still = await pool.query<{ cleanup_pending: boolean }>("SELECT cleanup_pending FROM jobs WHERE id = $1", [
        jobId,
      ]);
      if (still.rowCount === 0) break;
      if (Date.now() > deadline) throw new Error(`job not purged: cleanup_pending=${still.rows[0]?.cleanup_pending}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    expect((await pool.query("SELECT 1 FROM job_artifacts WHERE job_id = $1", [jobId])).rowCount).toBe(0);
    const fired = await fetch(
      `${t.stack.gatewayUrl}/cdn-cgi/handler/scheduled?cron=${encodeURIComponent("* * * * *")}`,
    );
    expect(fired.status).toBe(200);
    await fired.arrayBuffer();
    const left = await pool.query("SELECT sha256 FROM blobs WHERE tenant_id = $1", [t.stack.tenantId]);
    expect(left.rowCount).toBe(0);
    expect(await r2BlobFiles()).toEqual([]);
  }, 90_000);
});

/**
 * Blobs and artifacts (docs/architecture.md "Blobs and artifacts"). The host reserves a blob row
 * (counted against the tenant's storage cap) before it uploads the bytes through the gateway, and
 * records the artifact rows under its fence; the gateway reads them; the Worker's cron collects
 * blobs no artifact references any more.
 */
import { sql } from "drizzle-orm";
import type { Db } from "./client";
import { resultRows } from "./client";
import { isJobId } from "./jobs-repo";
import { type ExecutionIdentity, fence } from "./ownership-repo";

/** An hour: far longer than a host takes from reserving a blob to recording its artifact. */
export const BLOB_GRACE_DEFAULT_S = 3600;

export interface ArtifactRecord {
  path: string;
  bytes: number;
  sha256: string;
  contentType: string;
}

/** What the tenant's blobs hold now, in bytes (the storage cap's measure). */
export async function tenantStoredBytes(db: Db, tenantId: string): Promise<number> {
  const rows = resultRows<{ total: string | number | null }>(
    await db.execute(sql`SELECT coalesce(sum(bytes), 0) AS total FROM blobs WHERE tenant_id = ${tenantId}`),
  );
  return Number(rows[0]?.total ?? 0);
}

/**
 * Reserves the blob row (or refreshes `touched_at` of the one there, which spares it from
 * collection while the artifact row that will reference it is written). Returns whether the
 * bytes are new (an upload is needed) or `over_cap` when a new blob would take the tenant past
 * `capBytes` (nothing is written then). The cap is checked in the same statement as the insert,
 * so it is not a read-then-write race within one statement; two hosts uploading for one tenant
 * at once may overshoot it by at most one blob each.
 */
export async function reserveBlob(
  db: Db,
  tenantId: string,
  sha256: string,
  bytes: number,
  capBytes: number,
): Promise<"new" | "exists" | "over_cap"> {
  const touched = resultRows<{ sha256: string }>(
    await db.execute(sql`
      UPDATE blobs SET touched_at = now() WHERE tenant_id = ${tenantId} AND sha256 = ${sha256} RETURNING sha256`),
  );
  if (touched.length > 0) return "exists";
  const inserted = resultRows<{ sha256: string }>(
    await db.execute(sql`
      INSERT INTO blobs (tenant_id, sha256, bytes)
      SELECT ${tenantId}, ${sha256}, ${bytes}
      WHERE (SELECT coalesce(sum(bytes), 0) FROM blobs WHERE tenant_id = ${tenantId}) + ${bytes} <= ${capBytes}
      ON CONFLICT (tenant_id, sha256) DO UPDATE SET touched_at = now()
      RETURNING sha256`),
  );
  return inserted.length > 0 ? "new" : "over_cap";
}

/** The run's artifacts, written under its fence: a stale owner records nothing. */
export async function recordArtifacts(db: Db, id: ExecutionIdentity, artifacts: ArtifactRecord[]): Promise<boolean> {
  if (artifacts.length === 0) return true;
  const values = sql.join(
    artifacts.map(
      (a) =>
        sql`(${id.jobId}::uuid, ${a.path}, ${a.bytes}::bigint, ${a.sha256}, ${a.contentType}, ${id.executionId}::uuid)`,
    ),
    sql`, `,
  );
  const rows = resultRows<{ path: string }>(
    await db.execute(sql`
      WITH owner AS (SELECT tenant_id FROM jobs WHERE ${fence(id)})
      INSERT INTO job_artifacts (job_id, path, bytes, sha256, content_type, execution_id, tenant_id)
      SELECT v.job_id, v.path, v.bytes, v.sha256, v.content_type, v.execution_id, owner.tenant_id
      FROM (VALUES ${values}) AS v(job_id, path, bytes, sha256, content_type, execution_id), owner
      ON CONFLICT (job_id, path) DO UPDATE SET bytes = excluded.bytes, sha256 = excluded.sha256,
        content_type = excluded.content_type, execution_id = excluded.execution_id, created_at = now()
      RETURNING path`),
  );
  return rows.length === artifacts.length;
}

/** The job's artifacts in path order, or null when the tenant has no such job. */
export async function listArtifacts(db: Db, tenantId: string, jobId: string): Promise<ArtifactRecord[] | null> {
  if (!isJobId(jobId)) return null;
  const rows = resultRows<{
    owned: boolean;
    path: string | null;
    bytes: string | number;
    sha256: string;
    content_type: string;
  }>(
    await db.execute(sql`
      SELECT true AS owned, a.path, a.bytes, a.sha256, a.content_type
      FROM jobs j LEFT JOIN job_artifacts a ON a.job_id = j.id
      WHERE j.id = ${jobId} AND j.tenant_id = ${tenantId}
      ORDER BY a.path`),
  );
  if (rows.length === 0) return null;
  return rows.flatMap((r) =>
    r.path === null ? [] : [{ path: r.path, bytes: Number(r.bytes), sha256: r.sha256, contentType: r.content_type }],
  );
}

/** One artifact of the tenant's job; `job` null when the tenant has no such job. */
export async function getArtifact(
  db: Db,
  tenantId: string,
  jobId: string,
  path: string,
): Promise<{ job: boolean; artifact: ArtifactRecord | null }> {
  if (!isJobId(jobId)) return { job: false, artifact: null };
  const rows = resultRows<{ path: string | null; bytes: string | number; sha256: string; content_type: string }>(
    await db.execute(sql`
      SELECT a.path, a.bytes, a.sha256, a.content_type
      FROM jobs j LEFT JOIN job_artifacts a ON a.job_id = j.id AND a.path = ${path}
      WHERE j.id = ${jobId} AND j.tenant_id = ${tenantId}`),
  );
  const r = rows[0];
  if (!r) return { job: false, artifact: null };
  if (r.path === null) return { job: true, artifact: null };
  return {
    job: true,
    artifact: { path: r.path, bytes: Number(r.bytes), sha256: r.sha256, contentType: r.content_type },
  };
}

/** Blob `b` is named by no artifact and by no workspace snapshot in a job's journal (workspace.ts). */
const unreferenced =
  sql.raw(`NOT EXISTS (SELECT 1 FROM job_artifacts a WHERE a.tenant_id = b.tenant_id AND a.sha256 = b.sha256)
  AND NOT EXISTS (SELECT 1 FROM job_journal j JOIN jobs jb ON jb.id = j.job_id
    WHERE j.kind = 'snapshot' AND (j.payload->>'sha256') = b.sha256 AND jb.tenant_id = b.tenant_id)`);

/**
 * Blob rows no artifact or snapshot references and untouched for `graceMs` (a host between reserving and
 * recording is within it), deleted and returned, at most `limit`; the caller deletes their
 * objects. A row goes before its object: an object left by a failed delete is unreferenced bytes
 * (no row counts it), never a row that names missing bytes.
 */
export async function collectUnreferencedBlobs(
  db: Db,
  graceMs: number,
  limit = 500,
): Promise<Array<{ tenantId: string; sha256: string }>> {
  const rows = resultRows<{ tenant_id: string; sha256: string }>(
    await db.execute(sql`
      WITH doomed AS (
        SELECT b.tenant_id, b.sha256 FROM blobs b
        WHERE b.touched_at < now() - make_interval(secs => ${graceMs / 1000})
          AND ${unreferenced}
        ORDER BY b.touched_at
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      )
      DELETE FROM blobs b USING doomed d WHERE b.tenant_id = d.tenant_id AND b.sha256 = d.sha256
        AND ${unreferenced}
      RETURNING b.tenant_id, b.sha256`),
  );
  return rows.map((r) => ({ tenantId: r.tenant_id, sha256: r.sha256 }));
}

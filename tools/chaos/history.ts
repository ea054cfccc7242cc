/**
 * The chaos run's history, recorded by Postgres itself: AFTER UPDATE triggers on `jobs` and
 * `executions` append every change (old and new identity, which columns moved) to two audit
 * tables. The checker then judges what the database actually accepted, not what hosts say they
 * did. Installed by the harness into its own throwaway database only — this is a test
 * instrument, never a migration.
 */
import type pg from "pg";

export const INSTALL_HISTORY_SQL = `
CREATE TABLE IF NOT EXISTS chaos_job_history (
  seq bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  job_id uuid NOT NULL,
  old_state text, new_state text,
  old_owner text, new_owner text,
  old_epoch int, new_epoch int,
  old_token uuid, new_token uuid,
  old_exec uuid, new_exec uuid,
  heartbeat_moved boolean, timing_moved boolean, output_moved boolean
);
CREATE TABLE IF NOT EXISTS chaos_execution_history (
  seq bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  execution_id uuid NOT NULL,
  old_outcome text, new_outcome text
);
CREATE OR REPLACE FUNCTION chaos_job_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO chaos_job_history (job_id, old_state, new_state, old_owner, new_owner, old_epoch, new_epoch,
    old_token, new_token, old_exec, new_exec, heartbeat_moved, timing_moved, output_moved)
  VALUES (NEW.id, OLD.state, NEW.state, OLD.owner, NEW.owner, OLD.epoch, NEW.epoch,
    OLD.token, NEW.token, OLD.execution_id, NEW.execution_id,
    OLD.heartbeat_at IS DISTINCT FROM NEW.heartbeat_at,
    OLD.prepared_at IS DISTINCT FROM NEW.prepared_at OR OLD.first_output_at IS DISTINCT FROM NEW.first_output_at,
    OLD.output IS DISTINCT FROM NEW.output);
  RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION chaos_execution_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO chaos_execution_history (execution_id, old_outcome, new_outcome) VALUES (NEW.id, OLD.outcome, NEW.outcome);
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS chaos_job_audit ON jobs;
CREATE TRIGGER chaos_job_audit AFTER UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION chaos_job_audit();
DROP TRIGGER IF EXISTS chaos_execution_audit ON executions;
CREATE TRIGGER chaos_execution_audit AFTER UPDATE ON executions FOR EACH ROW EXECUTE FUNCTION chaos_execution_audit();
`;

export interface JobFinal {
  id: string;
  state: string;
  owner: string | null;
  epoch: number;
  token: string | null;
  executionId: string | null;
  claimedAt: Date | null;
}

export interface ExecutionRow {
  id: string;
  jobId: string;
  host: string;
  epoch: number;
  outcome: string | null;
}

export interface JobChange {
  seq: number;
  jobId: string;
  oldState: string;
  newState: string;
  oldOwner: string | null;
  newOwner: string | null;
  oldEpoch: number;
  newEpoch: number;
  oldToken: string | null;
  newToken: string | null;
  oldExec: string | null;
  newExec: string | null;
  heartbeatMoved: boolean;
  timingMoved: boolean;
  outputMoved: boolean;
}

export interface ExecutionChange {
  seq: number;
  executionId: string;
  oldOutcome: string | null;
  newOutcome: string | null;
}

export interface History {
  jobs: JobFinal[];
  executions: ExecutionRow[];
  jobChanges: JobChange[];
  executionChanges: ExecutionChange[];
}

export async function installHistory(pool: pg.Pool): Promise<void> {
  await pool.query(INSTALL_HISTORY_SQL);
}

/** Everything the checker needs, read in one snapshot transaction. */
export async function readHistory(pool: pg.Pool, jobIds?: string[]): Promise<History> {
  const c = await pool.connect();
  try {
    await c.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    const filter = jobIds ? "WHERE id = ANY($1::uuid[])" : "";
    const args = jobIds ? [jobIds] : [];
    const jobs = await c.query(
      `SELECT id, state, owner, epoch, token, execution_id, claimed_at FROM jobs ${filter}`,
      args,
    );
    const executions = await c.query(
      `SELECT id, job_id, host, epoch, outcome FROM executions ${jobIds ? "WHERE job_id = ANY($1::uuid[])" : ""}`,
      args,
    );
    const changes = await c.query(`SELECT * FROM chaos_job_history ORDER BY seq`);
    const execChanges = await c.query(`SELECT * FROM chaos_execution_history ORDER BY seq`);
    await c.query("COMMIT");
    return {
      jobs: jobs.rows.map((r) => ({
        id: r.id,
        state: r.state,
        owner: r.owner,
        epoch: Number(r.epoch),
        token: r.token,
        executionId: r.execution_id,
        claimedAt: r.claimed_at,
      })),
      executions: executions.rows.map((r) => ({
        id: r.id,
        jobId: r.job_id,
        host: r.host,
        epoch: Number(r.epoch),
        outcome: r.outcome,
      })),
      jobChanges: changes.rows.map((r) => ({
        seq: Number(r.seq),
        jobId: r.job_id,
        oldState: r.old_state,
        newState: r.new_state,
        oldOwner: r.old_owner,
        newOwner: r.new_owner,
        oldEpoch: Number(r.old_epoch),
        newEpoch: Number(r.new_epoch),
        oldToken: r.old_token,
        newToken: r.new_token,
        oldExec: r.old_exec,
        newExec: r.new_exec,
        heartbeatMoved: r.heartbeat_moved,
        timingMoved: r.timing_moved,
        outputMoved: r.output_moved,
      })),
      executionChanges: execChanges.rows.map((r) => ({
        seq: Number(r.seq),
        executionId: r.execution_id,
        oldOutcome: r.old_outcome,
        newOutcome: r.new_outcome,
      })),
    };
  } finally {
    await c.query("ROLLBACK").catch(() => {});
    c.release();
  }
}

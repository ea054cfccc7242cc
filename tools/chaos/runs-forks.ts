/**
 * Forks and replays under the run chaos harness's faults (`npm run chaos:runs -- --forks N`,
 * docs/architecture.md "Forks"): while hosts die, the forker makes new jobs from the load's jobs'
 * journals through the API, rotating through four kinds:
 *  - fork_finished: a fork of a finished job from a random step (0 … its last);
 *  - fork_running: a fork of a running job, from the steps committed so far;
 *  - fork_of_fork: a fork of an earlier fork, from a random step of its own journal;
 *  - replay: POST /v1/replays of the newest finished jobs of one agent (each a rerun from step 0).
 * Before each fork the source's journal is read; at the end every row read is read again.
 *
 * What must be zero (checkForks):
 *  - source_rows_changed: a row of any source's journal read before a fork that is missing or
 *    different at the end (a fork only reads its source);
 *  - prefix_calls_repeated: a tool call the MCP server saw from a job that did not journal that
 *    call itself, counted by call id (the idempotency key is `<job>:<call id>`): a call's origins
 *    are the jobs whose journal has its `call` row at an epoch ≥ 1 and not in the prefix they
 *    were forked with (copied at epoch 0), so a fork that made a call of its prefix again is
 *    caught whatever its key, and even if it journaled that call again;
 *  - recoveries_not_own: a fork whose `recoveries` is not its own executions less one (a fork
 *    starts at 0 whatever its source's count; the forked agents ask no person, so every later
 *    execution of a fork is a recovery);
 *  - forks_unfinished: a fork not in a final state after the recovery window;
 *  - fork_refused: a fork or replay the API refused with a 4xx other than 429 (a source it may
 *    fork, a body it must take). A 429 or 5xx is the API saying "later" under the load and the
 *    faults (a gateway's dependency timing out): counted as `fork_busy` and printed, not judged.
 */
import type pg from "pg";
import type { ToolCallRecord } from "./recording-mcp";

export const FORK_OPS = ["fork_finished", "fork_running", "fork_of_fork", "replay"] as const;
export type ForkOp = (typeof FORK_OPS)[number];

export interface ForkRecord {
  op: ForkOp;
  forkId: string;
  sourceId: string;
  /** The source's steps the fork continued after (its `forked_from.step`). */
  step: number;
}

type Api = (
  method: string,
  path: string,
  body?: unknown,
) => Promise<{ status: number; body: Record<string, unknown> | null }>;

export interface ForkerDeps {
  api: Api;
  db: pg.Pool;
  rand: () => number;
  log: (line: string) => void;
  /** The load's jobs a fork may start from (no approvals, no delegation: their agents ask no person). */
  sources: () => string[];
  /** The agents of those jobs (a replay's filter names one). */
  agents: readonly string[];
}

/** The source's journal rows, each as one string (seq → epoch, kind and payload). */
async function journalOf(db: pg.Pool, jobId: string): Promise<Map<number, string>> {
  const r = await db.query<{ seq: number; row: string }>(
    "SELECT seq, concat_ws('|', epoch, kind, payload::text) AS row FROM job_journal WHERE job_id = $1 ORDER BY seq",
    [jobId],
  );
  return new Map(r.rows.map((x) => [Number(x.seq), x.row]));
}

export class Forker {
  readonly records: ForkRecord[] = [];
  readonly made: Record<ForkOp, number> = { fork_finished: 0, fork_running: 0, fork_of_fork: 0, replay: 0 };
  readonly missed: Record<ForkOp, number> = { fork_finished: 0, fork_running: 0, fork_of_fork: 0, replay: 0 };
  refused = 0;
  /** Refusals that say "later" (429, 5xx): printed, not an anomaly. */
  busy = 0;
  /** What the API answered each refused fork or replay. */
  readonly refusals: string[] = [];
  /** Every source's rows as first read before a fork (later reads add rows appended since). */
  private readonly snapshots = new Map<string, Map<number, string>>();

  constructor(private readonly d: ForkerDeps) {}

  private refuse(status: number, what: string): void {
    if (status === 429 || status >= 500) this.busy++;
    else this.refused++;
    this.refusals.push(what);
    this.d.log(what);
  }

  get forkIds(): string[] {
    return this.records.map((r) => r.forkId);
  }

  private pick<T>(xs: readonly T[]): T | undefined {
    return xs[Math.floor(this.d.rand() * xs.length)];
  }

  private async snapshot(jobId: string): Promise<void> {
    const rows = await journalOf(this.d.db, jobId);
    const kept = this.snapshots.get(jobId) ?? new Map<number, string>();
    for (const [seq, row] of rows) if (!kept.has(seq)) kept.set(seq, row);
    this.snapshots.set(jobId, kept);
  }

  private async sourceIn(ids: string[], states: string[]): Promise<string | undefined> {
    if (ids.length === 0) return undefined;
    const r = await this.d.db.query<{ id: string }>(
      "SELECT id FROM jobs WHERE id = ANY($1::uuid[]) AND state = ANY($2::text[])",
      [ids, states],
    );
    return this.pick(r.rows.map((x) => x.id));
  }

  private async fork(op: ForkOp, sourceId: string, anyStep: boolean): Promise<void> {
    await this.snapshot(sourceId);
    let body: Record<string, unknown> = {};
    if (anyStep) {
      const steps = await this.d.api("GET", `/v1/jobs/${sourceId}/steps?limit=100`);
      const last = ((steps.body?.steps as Array<{ step: number }> | undefined) ?? []).at(-1)?.step ?? 0;
      body = { from_step: Math.floor(this.d.rand() * (last + 1)) };
    }
    const r = await this.d.api("POST", `/v1/jobs/${sourceId}/fork`, body);
    const job = r.body?.job as { id: string; forked_from: { job_id: string; step: number } } | undefined;
    if (r.status !== 202 || !job) {
      this.refuse(r.status, `${op} of ${sourceId}: ${r.status} ${JSON.stringify(r.body)}`);
      return;
    }
    this.records.push({ op, forkId: job.id, sourceId, step: job.forked_from.step });
    this.made[op]++;
    this.d.log(`${op}: ${job.id} from ${sourceId} after step ${job.forked_from.step}`);
  }

  /** One fork of kind `op`; a kind that finds no source now is counted missed. */
  async one(op: ForkOp): Promise<void> {
    if (op === "replay") {
      const agent = this.pick(this.d.agents) as string;
      const r = await this.d.api("POST", "/v1/replays", { filter: { agent, state: "completed", limit: 2 } });
      const id = (r.body?.replay as { id: string } | undefined)?.id;
      if (r.status !== 202 || !id) {
        this.refuse(r.status, `replay of ${agent}: ${r.status} ${JSON.stringify(r.body)}`);
        return;
      }
      const got = await this.d.api("GET", `/v1/replays/${id}`);
      const pairs = (got.body?.replay as { jobs: Array<{ source_job_id: string; job_id: string }> } | undefined)?.jobs;
      if (!pairs || pairs.length === 0) {
        this.missed.replay++;
        return;
      }
      for (const p of pairs) {
        // A rerun copies nothing; its source is read now, and must still read the same at the end.
        await this.snapshot(p.source_job_id);
        this.records.push({ op, forkId: p.job_id, sourceId: p.source_job_id, step: 0 });
      }
      this.made.replay++;
      return;
    }
    const source =
      op === "fork_finished"
        ? await this.sourceIn(this.d.sources(), ["completed", "failed"])
        : op === "fork_running"
          ? await this.sourceIn(this.d.sources(), ["running"])
          : this.pick(this.forkIds);
    if (!source) {
      this.missed[op]++;
      return;
    }
    await this.fork(op, source, op !== "fork_running");
  }

  /** The sources' snapshots against their rows now: rows checked, and those changed or gone. */
  async sourceRowsChanged(): Promise<{ checked: number; changed: number; detail: string[] }> {
    let checked = 0;
    let changed = 0;
    const detail: string[] = [];
    for (const [jobId, before] of this.snapshots) {
      const now = await journalOf(this.d.db, jobId);
      for (const [seq, row] of before) {
        checked++;
        if (now.get(seq) !== row) {
          changed++;
          detail.push(`${jobId} seq ${seq}: ${row} → ${now.get(seq) ?? "gone"}`);
        }
      }
    }
    return { checked, changed, detail };
  }
}

export interface ForkCheck {
  forks: number;
  made: Record<ForkOp, number>;
  missed: Record<ForkOp, number>;
  /** Forks whose source is itself a fork. */
  forksOfForks: number;
  sourceRowsChecked: number;
  sourceRowsChanged: number;
  prefixCallsRepeated: number;
  recoveriesNotOwn: number;
  forksUnfinished: number;
  forkRefused: number;
  /** Refused with a 429 or a 5xx (the API saying "later"): not an anomaly. */
  forkBusy: number;
  /** The forks' `recoveries`, summed (their own: each fork's host kills). */
  forkRecoveries: number;
  anomalies: number;
  detail: string[];
}

const callIdOf = (key: string) => key.slice(key.indexOf(":") + 1);

export async function checkForks(db: pg.Pool, forker: Forker, calls: ToolCallRecord[]): Promise<ForkCheck> {
  const ids = forker.forkIds;
  const detail: string[] = [];
  const rows = await forker.sourceRowsChanged();
  detail.push(...forker.refusals, ...rows.detail.slice(0, 10));

  // Every call id the MCP server saw, with the jobs that journaled its `call` row themselves.
  const callIds = [...new Set(calls.map((c) => callIdOf(c.key)))];
  const origins = new Map<string, Set<string>>();
  const o = await db.query<{ call_id: string; job_id: string }>(
    `SELECT payload->>'call_id' AS call_id, job_id FROM job_journal
     WHERE kind = 'call' AND payload->>'call_id' = ANY($1::text[])
     GROUP BY 1, 2 HAVING min(epoch) >= 1`,
    [callIds],
  );
  for (const r of o.rows) origins.set(r.call_id, (origins.get(r.call_id) ?? new Set()).add(r.job_id));
  let prefixCallsRepeated = 0;
  for (const c of calls) {
    const own = origins.get(callIdOf(c.key));
    if (own && !own.has(c.jobId)) {
      prefixCallsRepeated++;
      detail.push(`${c.tool} call ${c.key} made by ${c.jobId}, journaled by ${[...own].join(", ")}`);
    }
  }

  const f = await db.query<{ id: string; state: string; recoveries: number; execs: string }>(
    `SELECT j.id, j.state, j.recoveries, (SELECT count(*) FROM executions e WHERE e.job_id = j.id) AS execs
     FROM jobs j WHERE j.id = ANY($1::uuid[])`,
    [ids],
  );
  let recoveriesNotOwn = 0;
  let forksUnfinished = 0;
  let forkRecoveries = 0;
  for (const r of f.rows) {
    forkRecoveries += r.recoveries;
    if (["queued", "running", "waiting"].includes(r.state)) {
      forksUnfinished++;
      detail.push(`fork ${r.id} still ${r.state}`);
    }
    const execs = Number(r.execs);
    if (execs > 0 && r.recoveries !== execs - 1) {
      recoveriesNotOwn++;
      detail.push(`fork ${r.id}: recoveries ${r.recoveries}, executions ${execs}`);
    }
  }
  forksUnfinished += ids.length - f.rows.length;
  const forkSet = new Set(ids);
  const forksOfForks = forker.records.filter((r) => forkSet.has(r.sourceId)).length;
  return {
    forks: ids.length,
    made: forker.made,
    missed: forker.missed,
    forksOfForks,
    sourceRowsChecked: rows.checked,
    sourceRowsChanged: rows.changed,
    prefixCallsRepeated,
    recoveriesNotOwn,
    forksUnfinished,
    forkRefused: forker.refused,
    forkBusy: forker.busy,
    forkRecoveries,
    anomalies: rows.changed + prefixCallsRepeated + recoveriesNotOwn + forksUnfinished + forker.refused,
    detail,
  };
}

export function formatForkCheck(c: ForkCheck): string {
  const made = Object.entries(c.made)
    .map(([k, n]) => `${k} ${n} (missed ${c.missed[k as ForkOp]})`)
    .join(", ");
  return [
    `forks and reruns made: ${c.forks} (${made}); forks of forks ${c.forksOfForks}; their recoveries ${c.forkRecoveries}`,
    `  source journal rows checked   ${String(c.sourceRowsChecked).padStart(6)}`,
    `  source journal rows changed   ${String(c.sourceRowsChanged).padStart(6)}  must be 0`,
    `  prefix tool calls repeated    ${String(c.prefixCallsRepeated).padStart(6)}  must be 0`,
    `  fork recoveries not its own   ${String(c.recoveriesNotOwn).padStart(6)}  must be 0`,
    `  forks unfinished              ${String(c.forksUnfinished).padStart(6)}  must be 0`,
    `  forks refused (4xx)           ${String(c.forkRefused).padStart(6)}  must be 0`,
    `  forks answered "later"        ${String(c.forkBusy).padStart(6)}  (429 or 5xx under the load)`,
    `fork anomalies: ${c.anomalies}`,
  ].join("\n");
}

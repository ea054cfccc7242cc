/**
 * The claims checker, after Jepsen's total-queue checker: every submitted job gets exactly one
 * class from what Postgres accepted (final rows + the audit history, see history.ts). Pure, so
 * it is unit-tested on synthetic histories that contain each anomaly (checker.unit.test.ts).
 *
 * Valid outcomes: completed once; re-queued (a claim released before start) then completed;
 * `lost` or `timed_out` after exactly one start; failed after one start (reported, not an
 * anomaly: the model said no). A job may also be recovered (docs/architecture.md, "Recovery"):
 * its started execution's owner went silent and the reaper re-queued it (epoch + 1, owner,
 * token and execution cleared) for a new execution. Then the job has one start per recovery
 * plus one, executions strictly one after another (each earlier one ended `lost`, or
 * `handed_off` by a shutdown, before the next started: epochs rising, never two open at once), and ends in any of the outcomes above
 * (`recovered_then_completed` when it completes). Anomalies: double-started, stale write accepted, lost without a
 * start, stuck (not terminal after the recovery window), missing (submitted, no row), unexpected
 * (a row nobody submitted).
 */
import { isFinalState, stateOfTerminalEvent, terminalEventFor } from "../../src/contracts/job-state";
import type { ExecutionRow, History, JobChange } from "./history";

export const OK_CLASSES = [
  "completed_once",
  "requeued_then_completed",
  "recovered_then_completed",
  "lost",
  "timed_out",
  "failed",
] as const;
export const ANOMALY_CLASSES = [
  "double_started",
  "stale_write_accepted",
  "lost_without_start",
  "stuck",
  "missing",
  "unexpected",
] as const;
export type JobClass = (typeof OK_CLASSES)[number] | (typeof ANOMALY_CLASSES)[number];

export interface JobVerdict {
  id: string;
  cls: JobClass;
  /** Why, for anomalies (one line each). */
  reasons: string[];
  starts: number;
  releases: number;
  /** Re-queues of a started job for a new execution (the recovery edge). */
  recoveries?: number;
}

export interface CheckResult {
  counts: Record<JobClass, number>;
  anomalies: number;
  /** Queued jobs still holding an owner after the window (also counted as stuck). */
  leakedClaims: number;
  /** Claims released before start, summed over all jobs. */
  releases: number;
  verdicts: JobVerdict[];
}

export function checkHistory(submitted: Iterable<string>, h: History): CheckResult {
  const wanted = new Set(submitted);
  const changesOf = groupBy(h.jobChanges, (c) => c.jobId);
  const execsOf = groupBy(h.executions, (e) => e.jobId);
  const execChangesOf = groupBy(h.executionChanges, (c) => c.executionId);
  const verdicts: JobVerdict[] = [];
  let leakedClaims = 0;

  const seen = new Set<string>();
  for (const job of h.jobs) {
    seen.add(job.id);
    if (!wanted.has(job.id)) {
      verdicts.push({ id: job.id, cls: "unexpected", reasons: ["row was never submitted"], starts: 0, releases: 0 });
      continue;
    }
    const stale: string[] = [];
    const double: string[] = [];
    let starts = 0;
    let releases = 0;
    let recoveries = 0;
    for (const c of changesOf.get(job.id) ?? []) {
      const r = judgeChange(c);
      if (r.start) starts++;
      if (r.release) releases++;
      if (r.recover) {
        recoveries++;
        // A recovery ends the execution that was running: only one started since the last one.
        if (starts !== recoveries)
          double.push(`#${c.seq} recovered with ${starts} starts after ${recoveries - 1} recoveries`);
      }
      if (r.stale) stale.push(`#${c.seq} ${c.oldState}→${c.newState}: ${r.stale}`);
      if (r.double) double.push(`#${c.seq} ${r.double}`);
    }
    const execs = [...(execsOf.get(job.id) ?? [])].sort((a, b) => a.epoch - b.epoch);
    if (starts > recoveries + 1) double.push(`${starts} started CAS hits after ${recoveries} recoveries`);
    if (execs.length > recoveries + 1)
      double.push(`${execs.length} executions rows (epochs ${execs.map((e) => e.epoch).join(",")})`);
    const current = execs.at(-1);
    for (const e of execs) {
      // An execution before the job's last one was ended by a recovery: lost, never the job's again.
      if (e !== current) {
        if (e.outcome !== "lost" && e.outcome !== "handed_off") {
          stale.push(`execution ${e.id} before a recovery ended ${e.outcome}, not lost or handed_off`);
        }
        if (e.id === job.executionId) stale.push(`execution ${e.id} is the job's again after a recovery`);
        continue;
      }
      stale.push(...judgeExecution(e, job, execChangesOf.get(e.id) ?? []));
    }
    if (isFinalState(job.state) && job.state !== "cancelled" && starts === 0 && execs.length > 0) {
      stale.push("terminal with an execution but no recorded start");
    }

    let cls: JobClass;
    let reasons: string[] = [];
    if (double.length) [cls, reasons] = ["double_started", [...double, ...stale]];
    else if (stale.length) [cls, reasons] = ["stale_write_accepted", stale];
    else if (job.state === "queued" || job.state === "running") {
      cls = "stuck";
      reasons = [`still ${job.state}${job.owner ? ` (owner ${job.owner}, epoch ${job.epoch})` : ""}`];
      if (job.state === "queued" && job.owner !== null) leakedClaims++;
    } else if (job.state === "lost" || job.state === "timed_out") {
      if (starts === recoveries + 1 && execs.length === starts) cls = job.state;
      else [cls, reasons] = ["lost_without_start", [`${job.state} with ${starts} starts, ${execs.length} executions`]];
    } else if (job.state === "completed") {
      if (starts === recoveries + 1 && execs.length === starts) {
        cls =
          recoveries > 0 ? "recovered_then_completed" : job.epoch > 1 ? "requeued_then_completed" : "completed_once";
      } else [cls, reasons] = ["stale_write_accepted", [`completed with ${starts} starts, ${execs.length} executions`]];
    } else if (job.state === "failed") {
      if (starts === recoveries + 1 && execs.length === starts) cls = "failed";
      else [cls, reasons] = ["stale_write_accepted", [`failed with ${starts} starts, ${execs.length} executions`]];
    } else {
      [cls, reasons] = ["stale_write_accepted", [`unexpected final state ${job.state}`]];
    }
    verdicts.push({ id: job.id, cls, reasons, starts, releases, recoveries });
  }
  for (const id of wanted) {
    if (!seen.has(id)) verdicts.push({ id, cls: "missing", reasons: ["no row"], starts: 0, releases: 0 });
  }

  const counts = Object.fromEntries([...OK_CLASSES, ...ANOMALY_CLASSES].map((c) => [c, 0])) as Record<JobClass, number>;
  for (const v of verdicts) counts[v.cls]++;
  const anomalies = ANOMALY_CLASSES.reduce((n, c) => n + counts[c], 0);
  const releases = verdicts.reduce((n, v) => n + v.releases, 0);
  return { counts, anomalies, leakedClaims, releases, verdicts };
}

interface ChangeJudgement {
  start?: boolean;
  release?: boolean;
  /** The recovery edge: a started job re-queued for a new execution. */
  recover?: boolean;
  stale?: string;
  double?: string;
}

/** One accepted UPDATE of a job row, judged against the state machine and fencing rules. */
export function judgeChange(c: JobChange): ChangeJudgement {
  const sameIdentity =
    c.oldOwner === c.newOwner && c.oldEpoch === c.newEpoch && c.oldToken === c.newToken && c.oldExec === c.newExec;
  if (c.newEpoch < c.oldEpoch) return { stale: `epoch went back ${c.oldEpoch}→${c.newEpoch}` };
  if (isFinalState(c.oldState)) return { stale: "a write after the terminal state was accepted" };

  if (c.oldState === "queued" && c.newState === "queued") {
    if (c.oldOwner === null && c.newOwner !== null) {
      return c.newEpoch === c.oldEpoch + 1 && c.newToken !== null && c.newExec === null
        ? {}
        : { stale: `claim without an epoch bump and fresh token (${c.oldEpoch}→${c.newEpoch})` };
    }
    if (c.oldOwner !== null && c.newOwner === null) {
      return c.newEpoch === c.oldEpoch && c.newToken === null
        ? { release: true }
        : { stale: "release changed the epoch" };
    }
    if (c.oldOwner !== c.newOwner) return { stale: `claim taken over ${c.oldOwner}→${c.newOwner} without a release` };
    return sameIdentity ? {} : { stale: "identity changed on a queued job without a claim" };
  }
  if (c.oldState === "queued" && c.newState === "running") {
    const fenced = c.oldOwner !== null && c.oldExec === null && c.newExec !== null;
    return fenced && c.oldOwner === c.newOwner && c.oldEpoch === c.newEpoch && c.oldToken === c.newToken
      ? { start: true }
      : { start: true, stale: "started with an identity other than the claim's" };
  }
  if (c.oldState === "queued" && c.newState === "cancelled") return {};
  if (c.oldState === "queued") return { stale: `left queued for ${c.newState} without a start` };
  if (c.oldState === "running" && c.newState === "queued") {
    // The recovery edge: the execution is over (cleared), the epoch one up, no owner or token.
    return c.newOwner === null && c.newToken === null && c.newExec === null && c.newEpoch === c.oldEpoch + 1
      ? { recover: true }
      : { double: "re-queued after it had started, not as a recovery (owner, token, execution cleared, epoch + 1)" };
  }
  if (c.oldState === "running") {
    return sameIdentity ? {} : { stale: `a running job's identity changed (epoch ${c.oldEpoch}→${c.newEpoch})` };
  }
  return { stale: `unknown transition` };
}

function judgeExecution(e: ExecutionRow, job: History["jobs"][number], changes: History["executionChanges"]): string[] {
  const out: string[] = [];
  if (e.id !== job.executionId) out.push(`execution ${e.id} is not the job's execution ${job.executionId}`);
  else if (e.epoch !== job.epoch || e.host !== job.owner) {
    out.push(`execution (host ${e.host}, epoch ${e.epoch}) ≠ job (owner ${job.owner}, epoch ${job.epoch})`);
  }
  if (isFinalState(job.state) && e.id === job.executionId && e.outcome !== job.state) {
    out.push(`execution outcome ${e.outcome} ≠ job state ${job.state}`);
  }
  if (!isFinalState(job.state) && e.outcome !== null)
    out.push(`execution has outcome ${e.outcome} but job is ${job.state}`);
  for (const c of changes) {
    if (c.oldOutcome !== null && c.oldOutcome !== c.newOutcome) {
      out.push(`execution outcome overwritten ${c.oldOutcome}→${c.newOutcome}`);
    }
  }
  return out;
}

export function groupBy<T>(items: T[], key: (t: T) => string): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const it of items) {
    const k = key(it);
    const list = m.get(k);
    if (list) list.push(it);
    else m.set(k, [it]);
  }
  return m;
}

/** A job's row, as its event stream must reflect it. */
export interface StreamRow {
  id: string;
  state: string;
  executionId: string | null;
  /** `execution_started_at` is set: the started CAS hit. */
  started: boolean;
  output: string | null;
}

/** One event of a job's stream as a client received it. */
export interface StreamEvent {
  offset: number;
  type: string;
  executionId: string;
  payload: Record<string, unknown>;
}

/**
 * Where a job's stream disagrees with its row (one line each; empty when they agree): offsets
 * contiguous from 1; exactly one terminal event, last, matching the row's state and execution;
 * the row's execution's first event (`run.started`, or `run.recovered` when it continues a
 * recovered job) exactly once, before the terminal event, iff the row started, and at most one
 * `run.started` in all (only a job's first execution has one); a completion's output equal to
 * the row's. A job still running has no terminal event.
 */
export function streamDisagreements(row: StreamRow, events: StreamEvent[]): string[] {
  const out: string[] = [];
  events.forEach((e, i) => {
    if (e.offset !== i + 1 && out.length === 0) out.push(`offset ${e.offset} at position ${i + 1}`);
  });
  const terminals = events.filter((e) => stateOfTerminalEvent(e.type) !== null);
  const expected = terminalEventFor(row.state);
  if (!expected) {
    if (terminals.length) out.push(`row is ${row.state} but the stream has ${terminals.map((t) => t.type).join(", ")}`);
    return out;
  }
  if (terminals.length !== 1) {
    out.push(`${terminals.length} terminal events (${terminals.map((t) => t.type).join(", ") || "none"})`);
  }
  const terminal = terminals[0];
  if (terminal) {
    if (terminal !== events[events.length - 1]) out.push(`${terminal.type} is not the last event`);
    if (terminal.type !== expected) out.push(`stream ends ${terminal.type}, row is ${row.state}`);
    const exec = row.executionId ?? "projector";
    if (terminal.executionId !== exec) out.push(`terminal event of execution ${terminal.executionId}, row's ${exec}`);
    if (row.state === "completed" && terminal.payload.output !== row.output) {
      out.push("completed output differs from the row's");
    }
  }
  const starts = events.filter((e) => e.type === "run.started");
  const firsts = events.filter(
    (e) => e.type === "run.started" || e.type === "run.recovered" || e.type === "run.forked",
  );
  if (row.started) {
    const mine = firsts.filter((e) => e.executionId === row.executionId);
    if (mine.length !== 1 || starts.length > 1) {
      out.push(`row started, stream has ${starts.length} run.started (${mine.length} first events of its execution)`);
    } else if (terminal && (mine[0] as StreamEvent).offset > terminal.offset) {
      out.push(`${(mine[0] as StreamEvent).type} after the terminal event`);
    }
  } else if (starts.length) out.push(`row never started, stream has ${starts.length} run.started`);
  return out;
}

/** The counts table as printed by the harness. */
export function formatCounts(r: CheckResult): string {
  const rows = [
    ...OK_CLASSES.map((c) => [c, r.counts[c], ""] as const),
    ...ANOMALY_CLASSES.map((c) => [c, r.counts[c], "ANOMALY"] as const),
    ["leaked_claims", r.leakedClaims, "ANOMALY (⊂ stuck)"] as const,
  ];
  const total = r.verdicts.length;
  const lines = [
    `jobs classified: ${total}`,
    ...rows.map(([k, v, tag]) => `  ${k.padEnd(26)}${String(v).padStart(6)}  ${tag}`),
  ];
  lines.push(`  ${"claims released pre-start".padEnd(26)}${String(r.releases).padStart(6)}`);
  lines.push(`anomalies: ${r.anomalies}`);
  return lines.join("\n");
}

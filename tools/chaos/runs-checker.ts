/**
 * The run checker of `npm run chaos:runs` (runs-harness.ts): the model where a job may continue
 * in a new execution after its host died or was replaced (docs/architecture.md). Pure, so it is
 * unit-tested on synthetic histories with each anomaly (runs-checker.unit.test.ts).
 *
 * Judged from what Postgres accepted (the `jobs` and `executions` rows), what the recording MCP
 * server saw (recording-mcp.ts) and every job's event stream as a client reads it:
 *  - executions of one job come one after another, never interleaved: ordered by epoch, each one
 *    ended before the next started;
 *  - a non-idempotent tool call (`charge`) runs at most once per idempotency key, whatever the
 *    crashes; an idempotent one (`lookup`) may be called again, with the same key;
 *  - no tool call of an execution begins after its successor started (a partitioned or paused
 *    old owner stopped its side effects before the job was handed on);
 *  - every recovery is visible: the stream has exactly as many `run.recovered` as the row's
 *    `recoveries`, one per execution, in epoch order (the gateway projects the event from Postgres
 *    for an execution that died before its outbox delivered it);
 *  - streams agree with rows: offsets contiguous from 1, exactly one terminal event, last, for the
 *    row's state, a completion's output equal to the row's, and rebuilt by the `model.delta`
 *    text after the last restart point (`run.recovered`, `run.resumed`, a `model.turn` restart),
 *    or, for a completion projected from Postgres (its deltas may have died with its host),
 *    that text at least a start of the output, never a different answer;
 *  - nothing stranded: every job terminal after the recovery window.
 */
import { stateOfTerminalEvent, terminalEventFor } from "../../src/contracts/job-state";
import { groupBy as group } from "./checker";
import type { JobStreamEvent } from "./job-stream";
import type { ToolCallRecord } from "./recording-mcp";

export const RUN_OK_CLASSES = ["completed", "completed_after_recovery", "lost", "failed", "other_final"] as const;
export const RUN_ANOMALY_CLASSES = [
  "interleaved_executions",
  "tool_repeated",
  "call_after_handoff",
  "recovery_unseen",
  "stream_disagrees",
  "stuck",
  "missing",
] as const;
export type RunClass = (typeof RUN_OK_CLASSES)[number] | (typeof RUN_ANOMALY_CLASSES)[number];

export interface RunJobRow {
  id: string;
  state: string;
  recoveries: number;
  output: string | null;
}

export interface RunExecutionRow {
  id: string;
  jobId: string;
  epoch: number;
  /** Epoch ms (Postgres' clock, the same machine's as the recorder's). */
  startedAt: number;
  finishedAt: number | null;
}

/** One event of a job's stream as a client received it. */
export type RunStreamEvent = JobStreamEvent;

export interface RunVerdict {
  id: string;
  cls: RunClass;
  reasons: string[];
}

export interface RunCheckResult {
  counts: Record<RunClass, number>;
  anomalies: number;
  verdicts: RunVerdict[];
  /** Idempotent calls made again with the same key (allowed; shows the re-call path ran). */
  idempotentRecalls: number;
  /** The rows' `recoveries`, summed. */
  recoveries: number;
  /** Non-idempotent calls made again after a person approved them again (outcome unknown). */
  reapproved: number;
  /** Recoveries whose `run.recovered` the gateway projected from Postgres (`source: "projector"`). */
  recoveriesProjected: number;
}

export interface RunHistory {
  jobs: RunJobRow[];
  executions: RunExecutionRow[];
  calls: ToolCallRecord[];
  /** Approvals given per idempotency key (`<job id>:<call id>`) by the harness's person. */
  approvals?: Map<string, number>;
  /** Each job's stream, as read after the window (absent: not read). */
  streams: Map<string, RunStreamEvent[]>;
}

export function checkRuns(submitted: Iterable<string>, h: RunHistory): RunCheckResult {
  const rows = new Map(h.jobs.map((j) => [j.id, j]));
  const execsOf = group(h.executions, (e) => e.jobId);
  const callsOf = group(h.calls, (c) => c.jobId);
  const verdicts: RunVerdict[] = [];
  let idempotentRecalls = 0;
  let reapproved = 0;
  let recoveriesProjected = 0;
  let recoveries = 0;
  for (const id of submitted) {
    const row = rows.get(id);
    if (!row) {
      verdicts.push({ id, cls: "missing", reasons: ["submitted, no row"] });
      continue;
    }
    recoveries += row.recoveries;
    const execs = [...(execsOf.get(id) ?? [])].sort((a, b) => a.epoch - b.epoch);
    const byExec = new Map(execs.map((e, i) => [e.id, i]));
    const found: Array<[RunClass, string]> = [];

    for (let i = 1; i < execs.length; i++) {
      const prev = execs[i - 1] as RunExecutionRow;
      const next = execs[i] as RunExecutionRow;
      if (prev.finishedAt === null || prev.finishedAt > next.startedAt) {
        found.push([
          "interleaved_executions",
          `execution ${prev.id} (epoch ${prev.epoch}) ${prev.finishedAt === null ? "never ended" : "ended after"} its successor (epoch ${next.epoch}) started`,
        ]);
      }
    }

    const calls = callsOf.get(id) ?? [];
    for (const [key, same] of group(calls, (c) => `${c.tool}\u0000${c.key}`)) {
      const tool = key.split("\u0000")[0];
      if (same.length < 2) continue;
      if (tool === "charge") {
        // A call that needs approval and was in flight at a loss goes back to a person: each
        // approval they gave is consent to one call (recovery asks again, "outcome unknown").
        const consented = Math.max(1, h.approvals?.get(same[0]?.key ?? "") ?? 0);
        if (same.length > consented) {
          found.push([
            "tool_repeated",
            `charge called ${same.length} times with key ${same[0]?.key} (${consented} consented)`,
          ]);
        } else if (same.length > 1) reapproved += same.length - 1;
      } else idempotentRecalls += same.length - 1;
    }
    for (const c of calls) {
      const at = byExec.get(c.executionId);
      if (at === undefined) {
        found.push(["call_after_handoff", `${c.tool} call from execution ${c.executionId}, not one of the job's`]);
        continue;
      }
      const next = execs[at + 1];
      if (next && c.startedAt > next.startedAt) {
        found.push([
          "call_after_handoff",
          `${c.tool} call of epoch ${c.epoch} began ${c.startedAt - next.startedAt} ms after epoch ${next.epoch} started`,
        ]);
      }
    }

    const events = h.streams.get(id);
    if (events) {
      const recovered = events.filter((e) => e.type === "run.recovered");
      recoveriesProjected += recovered.filter((e) => e.payload.source === "projector").length;
      // Which executions (by position in epoch order) the stream shows recovering, and whose word it is.
      const shown = () => {
        const lifecycle = events
          .filter(
            (e) => e.type.startsWith("run.") || e.type === "tool.approval_requested" || e.type === "child.created",
          )
          .map((e) => `#${byExec.get(e.executionId) ?? "?"} ${e.type}${e.payload.source === "projector" ? "*" : ""}`);
        return `of ${execs.length} executions; lifecycle: ${lifecycle.join(", ")}; * = projected`;
      };
      if (recovered.length !== row.recoveries) {
        found.push([
          "recovery_unseen",
          `row says ${row.recoveries} recoveries, the stream has ${recovered.length} run.recovered (${shown()})`,
        ]);
      }
      // One per execution of the job, in epoch order: a repeat or a reordering is not the history.
      const at = recovered.map((e) => byExec.get(e.executionId) ?? -1);
      if (at.some((i, k) => i < 0 || (k > 0 && i <= (at[k - 1] as number)))) {
        found.push(["recovery_unseen", `run.recovered of ${shown()}: not one each, in epoch order`]);
      }
      for (const why of runStreamDisagreements(row, events)) found.push(["stream_disagrees", why]);
    }

    if (terminalEventFor(row.state) === null) found.push(["stuck", `still ${row.state} after the window`]);

    if (found.length) {
      verdicts.push({ id, cls: (found[0] as [RunClass, string])[0], reasons: found.map(([c, why]) => `${c}: ${why}`) });
    } else {
      const cls: RunClass =
        row.state === "completed"
          ? row.recoveries > 0
            ? "completed_after_recovery"
            : "completed"
          : row.state === "lost" || row.state === "failed"
            ? row.state
            : "other_final";
      verdicts.push({ id, cls, reasons: [] });
    }
  }
  const counts = Object.fromEntries([...RUN_OK_CLASSES, ...RUN_ANOMALY_CLASSES].map((c) => [c, 0])) as Record<
    RunClass,
    number
  >;
  for (const v of verdicts) counts[v.cls]++;
  const anomalies = RUN_ANOMALY_CLASSES.reduce((n, c) => n + counts[c], 0);
  return { counts, anomalies, verdicts, idempotentRecalls, reapproved, recoveriesProjected, recoveries };
}

/** Where a restart point leaves the text a client is rebuilding: nothing of before counts. */
const RESTARTS = new Set(["run.recovered", "run.resumed"]);

/**
 * A job's stream against its row (one line each; empty when they agree): offsets contiguous from
 * 1; exactly one terminal event, last, for the row's state; a completion's output equal to the
 * row's, and equal to the `model.delta` text since the last restart point (a `run.recovered`, a
 * `run.resumed`, or a `model.turn` event, which starts a turn over or a new one).
 */
export function runStreamDisagreements(row: RunJobRow, events: RunStreamEvent[]): string[] {
  const out: string[] = [];
  events.forEach((e, i) => {
    if (e.offset !== i + 1 && out.length === 0) out.push(`offset ${e.offset} at position ${i + 1}`);
  });
  const terminals = events.filter((e) => stateOfTerminalEvent(e.type) !== null);
  const expected = terminalEventFor(row.state);
  if (!expected) return out;
  if (terminals.length !== 1) {
    out.push(`${terminals.length} terminal events (${terminals.map((t) => t.type).join(", ") || "none"})`);
  }
  const terminal = terminals[0];
  if (!terminal) return out;
  if (terminal !== events[events.length - 1]) out.push(`${terminal.type} is not the last event`);
  if (terminal.type !== expected) out.push(`stream ends ${terminal.type}, row is ${row.state}`);
  if (row.state === "completed") {
    // A completion projected from Postgres (payload.source "projector"): its execution died after
    // its terminal write, before its outbox delivered everything, so the deltas since the last
    // restart point may stop short. They must still be a start of the answer, and the event
    // carries the row's output (cut like any payload too big for an event).
    const projected = terminal.payload.source === "projector";
    const output = terminal.payload.output;
    const outputAgrees =
      terminal.payload.truncated === true
        ? typeof output === "string" && row.output !== null && row.output.startsWith(output)
        : output === row.output || (projected && row.output === null && output === "");
    if (!outputAgrees) out.push("completed output differs from the row's");
    let text = "";
    for (const e of events) {
      if (RESTARTS.has(e.type) || e.type === "model.turn") text = "";
      else if (e.type === "model.delta") text += String(e.payload.text ?? "");
    }
    if (row.output !== null && (projected ? !row.output.startsWith(text) : text !== row.output)) {
      out.push(`the deltas since the last restart point rebuild ${JSON.stringify(text.slice(0, 60))}, not the output`);
    }
  }
  return out;
}

/** The counts table as printed by the harness. */
export function formatRunCounts(r: RunCheckResult): string {
  const lines = [`jobs classified: ${r.verdicts.length}`];
  for (const c of RUN_OK_CLASSES) lines.push(`  ${c.padEnd(26)}${String(r.counts[c]).padStart(6)}`);
  for (const c of RUN_ANOMALY_CLASSES) lines.push(`  ${c.padEnd(26)}${String(r.counts[c]).padStart(6)}  ANOMALY`);
  lines.push(`  ${"recoveries (sum)".padEnd(26)}${String(r.recoveries).padStart(6)}`);
  lines.push(`  ${"idempotent re-calls".padEnd(26)}${String(r.idempotentRecalls).padStart(6)}`);
  lines.push(`  ${"calls re-approved".padEnd(26)}${String(r.reapproved).padStart(6)}`);
  lines.push(`  ${"recoveries projected".padEnd(26)}${String(r.recoveriesProjected).padStart(6)}`);
  lines.push(`anomalies: ${r.anomalies}`);
  return lines.join("\n");
}

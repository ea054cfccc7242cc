/**
 * One claimed job, start to terminal state (or to a waitpoint, or handed off at shutdown): the
 * started CAS, the agent (agent-loop.ts), the fenced terminal write and its event (or the fenced
 * suspend, waitpoint.ts, or the fenced hand-off), phase metrics, sandbox cleanup. Every write carries the
 * execution identity; the moment one misses (or a heartbeat says the row is no longer ours) the
 * run stops producing events under that identity. Events already produced keep being delivered.
 */
import { cancelClaim, type FinalOutcome, type FinishResult, handOffRun } from "../../src/db/ownership-repo";
import { deriveLatency, type TimingFacts } from "../../src/domain/timing";
import { errorFields } from "../log";
import { observeRunPhases } from "../metrics/metrics";
import { inExecutionSpan, markOutcome } from "../tracing/spans";
import { readRow, runAgent, unexpectedOutcome } from "./agent-loop";
import { collectArtifacts } from "./artifacts";
import { type ActiveRun, type Emit, Execution, type RunDeps, runFields } from "./run-context";
import { destroySandbox } from "./tool-step";
import { suspendRun, type WaitOutcome } from "./waitpoint";
import { keepsConversationWorkspace, snapshotWorkspace } from "./workspace";

export type RunResult =
  | "not_started"
  | "cancelled_before_start"
  | "completed"
  | "failed"
  | "cancelled"
  | "ownership_lost"
  | "finish_error"
  /** Ended cleanly at a waitpoint: the job is `waiting`, and the execution `suspended`. */
  | "suspended"
  /** Stopped by the host's shutdown at its last journaled step; the job is queued for a new execution. */
  | "handed_off";

/**
 * The run path: claim (the claimer made `run.identity`) → the started CAS under it → `Execution`,
 * built here once → each step with it (readRow, runAgent, suspendRun or handOff) → the terminal
 * write under the same identity.
 */
export async function runJob(deps: RunDeps, run: ActiveRun): Promise<RunResult> {
  const { log } = deps;
  const id = run.identity;
  const fields = { ...runFields(id), epoch: id.epoch };

  const { started, sentAt: startSentAt } = await deps.writes.start(id);
  if (!started) {
    // Cancelled before it started: end it with our claim identity. Otherwise someone else owns
    // it now (claim released and re-claimed): not ours to run.
    if (await cancelClaim(deps.db, id).catch(() => false)) {
      log.info("cancel requested before start; job cancelled", fields);
      return "cancelled_before_start";
    }
    log.info("start CAS missed; dropping the claim", fields);
    return "not_started";
  }
  run.start(startSentAt);
  // One line at each end of a run (the runner logs its outcome): without them a host that runs
  // jobs well says nothing at all, and an operator (or `npm run dev`'s log) cannot tell which
  // host ran a job.
  log.info("job started", fields);
  const out = deps.outbox.open(id);
  const emit: Emit = (type, payload) => {
    if (run.owned) out.emit(type, payload);
  };
  const exec = new Execution({ deps, run, emit });

  try {
    // The first event (run.started, run.resumed at a waitpoint, run.recovered after a lost owner) is readRow's.
    let outcome: FinalOutcome | WaitOutcome;
    try {
      const start = await readRow(exec);
      const traced = {
        ...id,
        tenantId: exec.job.tenantId,
        traceparent: exec.job.traceparent,
        clientTraceparent: exec.job.clientTraceparent,
      };
      outcome = await inExecutionSpan(deps.tracing, traced, async (span) => {
        const ended = await runAgent(exec, start);
        markOutcome(span, ended.state, ended.state === "failed" ? ended.error : null);
        return ended;
      });
    } catch (err) {
      outcome = unexpectedOutcome(exec, err, "");
    }
    if (!run.owned) {
      log.warn("run lost ownership; stopped without a terminal event", { ...fields, lost_by: run.lostBy });
      return "ownership_lost";
    }
    if (run.abortReason === "host_shutdown" && outcome.state === "failed" && outcome.error.code === "host_shutdown") {
      const handed = await handOff(exec);
      if (handed !== "not_allowed") return handed;
      // The agent allows no recovery: the run fails host_shutdown, as before hand-offs.
    }
    if (outcome.state === "waiting") {
      let suspended: Awaited<ReturnType<typeof suspendRun>>;
      try {
        suspended = await suspendRun(exec, outcome);
      } catch (err) {
        // Unknown whether it hit: the row is either waiting (no owner) or still running under
        // this execution, which stops heartbeating now and is reaped as lost.
        log.error("suspend write failed", { ...fields, ...errorFields(err) });
        return "finish_error";
      }
      if (suspended === "suspended") return "suspended";
      if (suspended === "ownership_lost") {
        log.warn("suspend missed: no longer the owner; emitting nothing further", fields);
        return "ownership_lost";
      }
      // A cancel was requested while the call was being made: end the run cancelled.
      outcome = { state: "cancelled", output: outcome.text || null };
    }
    run.phase = "finishing";
    // A conversation workspace: the workspace as the job ended it (completed, failed, cancelled)
    // is what the conversation's next job starts from, journaled before the terminal write ends
    // the fence (a no-op when the last step's snapshot already holds it, or no sandbox was made).
    if (run.sandboxUsed && keepsConversationWorkspace(exec.job)) await snapshotWorkspace(exec);
    // Before the terminal write: a client that sees the run end finds its artifacts listed.
    await collectArtifacts(exec);
    if (outcome.state === "cancelled") emit("cancel.accepted", { via: run.cancelledVia });
    let finished: boolean;
    let written: FinishResult;
    try {
      // The terminal write also carries the timing facts no heartbeat has written yet.
      // events_through: the projector waits for the outbox to deliver up to it before it would
      // end the stream from the row (a backlog under load is not a dead host).
      written = await deps.writes.finish({ id, outcome, facts: run.pendingFacts(), eventsThrough: out.lastSeq });
      finished = written.written;
      if (finished && written.cancelLagSeconds !== null) {
        deps.metrics.cancelConvergence.observe({ outcome: outcome.state }, written.cancelLagSeconds);
      }
    } catch (err) {
      // The reaper will mark the run lost; the projector learns the terminal state from Postgres.
      log.error("terminal write failed", { ...fields, ...errorFields(err) });
      return "finish_error";
    }
    if (!finished) {
      run.owned = false;
      log.warn("terminal write missed: no longer the owner; emitting nothing further", fields);
      return "ownership_lost";
    }
    if (outcome.state === "completed") emit("run.completed", { output: outcome.output });
    else if (outcome.state === "failed") emit("run.failed", { error: outcome.error });
    else emit("run.cancelled", { output: outcome.output ?? null });
    observePhases(exec, written.facts);
    return outcome.state;
  } finally {
    run.phase = "done";
    if (run.sandboxUsed && deps.sandbox) await destroySandbox(exec);
    out.end();
  }
}

/**
 * The grace of a shutdown ran out: hand the job to a new execution at once (src/db/ownership-repo.ts
 * `handOffRun`) instead of failing it. The sandbox goes first, inside its cleanup fence (as at a
 * suspend: afterwards the row names no execution the janitor could match it by). The steps the
 * run completed are in the journal; the one it was in is discarded (a model turn is asked again,
 * a tool call in flight is treated as at a loss: recovery.ts). A failed statement is logged and
 * leaves the run to the reaper, which recovers it after the lost bound instead.
 */
async function handOff(exec: Execution): Promise<"handed_off" | "ownership_lost" | "not_allowed"> {
  const { deps, run, id } = exec;
  const fields = { ...runFields(id), epoch: id.epoch };
  run.phase = "finishing";
  if (run.sandboxUsed && deps.sandbox) {
    // The next execution continues from the last journaled step: it restores this workspace.
    await snapshotWorkspace(exec);
    await destroySandbox(exec);
    run.sandboxUsed = false;
  }
  try {
    const handed = await handOffRun(deps.db, id);
    if (handed === "handed_off") {
      deps.log.info("shutdown: run handed off at its last journaled step", fields);
      return "handed_off";
    }
    if (handed === "not_owner") {
      run.owned = false;
      return "ownership_lost";
    }
    return "not_allowed";
  } catch (err) {
    deps.log.error("hand-off write failed; the reaper will recover the run", { ...fields, ...errorFields(err) });
    return "ownership_lost";
  }
}

/** Phase histograms from the same five timestamps the API serializes (the terminal write returned them). */
function observePhases(exec: Execution, facts: TimingFacts | null): void {
  if (!facts) return;
  try {
    observeRunPhases(exec.deps.metrics, deriveLatency(facts));
  } catch (err) {
    exec.deps.log.warn("phase metrics not observed", { ...exec.fields, ...errorFields(err) });
  }
}

/**
 * First-event projection: the `run.started` / `run.recovered` of executions whose host delivered
 * none, read from Postgres (the executions rows and the journal) and written ahead of what
 * follows them, so the stream shows every execution Postgres knows, once, in epoch order
 * (docs/events.md, "Lifecycle facts from Postgres"). It owns no table: what it projects is
 * appended by the event log (EventLog.appendProjectedFirsts), which drops any execution that has
 * an event of its own. What an execution's first event is: postgres-facts.ts.
 */
import type { EventEnvelope, IngestBatch } from "../../../src/contracts/events";
import { log } from "../../log";
import type { IngestRefusal } from "../rpc";
import type { EventLog } from "./event-log";
import {
  type ExecutionHistoryLookup,
  type JobStateFacts,
  projectedFirstEvents,
  projectedStarted,
} from "./postgres-facts";

export class FirstEventProjection {
  /** @param history reads the job's executions; injectable (tests set `JobEventsObject.firsts.history`). */
  constructor(
    private readonly log: EventLog,
    public history: ExecutionHistoryLookup,
  ) {}

  /**
   * The first batch of an execution that did not open the job (its first event is not
   * `run.started`: it recovers from the journal or resumes from a wait) may follow executions that
   * delivered nothing, e.g. a recovering host SIGKILLed before its outbox sent `run.recovered`.
   * Postgres still knows them (executions rows, the journal), so their first events are projected
   * ahead of this batch, in order (EventLog.appendProjectedFirsts). One read per such generation;
   * an execution that opens the job, a generation already in the log, or a stale one costs none. A failed read
   * refuses the batch (`unavailable`: the host resends), so no recovery is skipped for good.
   */
  async beforeGeneration(batch: IngestBatch): Promise<EventEnvelope[] | IngestRefusal> {
    const first = batch.events[0] as EventEnvelope;
    if (this.log.finished || this.log.knowsExecution(first.execution_id)) return [];
    // An epoch the log has already passed is refused as stale (EventLog): not worth a read.
    if ((this.log.currentGeneration()?.epoch ?? -1) >= first.epoch) return [];
    const opening = batch.events.find((e) => e.seq === 1);
    if (opening?.type === "run.started") return [];
    // A first batch that opens with no first event at all (its host could not read the job row,
    // agent-loop.ts readRow, and sent only its end): this execution's own first event is
    // projected too, ahead of its events.
    const ownToo =
      opening !== undefined &&
      opening.type !== "run.recovered" &&
      opening.type !== "run.resumed" &&
      opening.type !== "run.forked";
    try {
      const history = await this.history(batch.job_id);
      return projectedFirstEvents(batch.job_id, history, ownToo ? first.epoch + 1 : first.epoch);
    } catch (err) {
      log.warn("execution history lookup failed", { jobId: batch.job_id, error: err });
      return { ok: false, reason: "unavailable", message: "cannot read the job's executions in Postgres" };
    }
  }

  /**
   * What precedes a projected terminal event: the first events of the executions up to the row's
   * own that delivered none (projectedFirstEvents; the log drops any it already has an event
   * for). When Postgres has no executions row for the row's execution (none is written before
   * the started CAS, so only a stale read), the row alone says it started: `run.started`.
   * A failed read throws (the terminal check retries at its next alarm).
   */
  async beforeTerminal(jobId: string, facts: JobStateFacts): Promise<EventEnvelope[]> {
    if (facts.executionId === null) return [];
    const history = await this.history(jobId);
    const firsts = projectedFirstEvents(jobId, history, facts.epoch + 1);
    if (!history.some((x) => x.executionId === facts.executionId)) {
      const started = projectedStarted(jobId, facts);
      if (started) firsts.push(started);
    }
    return firsts;
  }
}

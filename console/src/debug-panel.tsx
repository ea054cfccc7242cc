/**
 * One run's facts for debugging: the five timing facts and the latencies derived from them (as
 * the API reports them, never recomputed here), execution id, epoch and trace id, quota waits, waits for a
 * person (the execution that suspended and the one that resumed), recoveries and retries in words,
 * tool calls (labelled sandbox, MCP, code, delegate or question) and sandbox events, and the raw
 * event timeline with offsets and per-execution seq numbers.
 */
import type { JobView } from "./api";
import { foldRun, type OffsetEvent, payloadSummary, recoverySummaries } from "./run";

const FACTS = ["created_at", "started_at", "prepared_at", "first_output_at", "finished_at"] as const;
const LATENCIES = [
  ["dispatch_latency_ms", "dispatch (created → started)"],
  ["preparation_latency_ms", "preparation (started → prepared)"],
  ["model_first_output_latency_ms", "model first output (prepared → first output)"],
  ["first_output_latency_ms", "first output (created → first output)"],
  ["total_latency_ms", "total (created → finished)"],
] as const;

export function ms(v: number | null): string {
  return v === null ? "–" : `${v} ms`;
}

export function DebugPanel({ job, events }: { job: JobView | null; events: readonly OffsetEvent[] }) {
  const run = foldRun(events);
  const recoveries = recoverySummaries(events);
  return (
    <section class="debug" aria-label="Run details" data-testid="debug-panel">
      <div class="debug-grid">
        <table class="kv" data-testid="timing-facts">
          <caption>Timing facts</caption>
          <tbody>
            {FACTS.map((f) => (
              <tr key={f} data-fact={f}>
                <th scope="row" class="nowrap">
                  {f}
                </th>
                <td>
                  <time dateTime={job?.[f] ?? undefined}>{job?.[f] ?? "–"}</time>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        <table class="kv" data-testid="latencies">
          <caption>Derived latencies</caption>
          <tbody>
            {LATENCIES.map(([k, label]) => (
              <tr key={k} data-latency={k}>
                <th scope="row">{label}</th>
                <td class="nowrap">{ms(job?.latency[k] ?? null)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        <table class="kv">
          <caption>Execution</caption>
          <tbody>
            <tr>
              <th scope="row" class="nowrap">
                job
              </th>
              <td>
                <code>{job?.id ?? events[0]?.event.job_id ?? "–"}</code>
              </td>
            </tr>
            <tr>
              <th scope="row" class="nowrap">
                state
              </th>
              <td>{job?.state ?? "–"}</td>
            </tr>
            <tr>
              <th scope="row" class="nowrap">
                execution id
              </th>
              <td>
                <code data-testid="execution-id">{job?.execution_id ?? "–"}</code>
              </td>
            </tr>
            <tr>
              <th scope="row" class="nowrap">
                epoch
              </th>
              <td data-testid="epoch">{job?.epoch ?? "–"}</td>
            </tr>
            <tr>
              <th scope="row" class="nowrap">
                trace id
              </th>
              <td>
                <code data-testid="trace-id" title="the OpenTelemetry trace of the run's spans (hosts with tracing on)">
                  {job?.trace_id ?? "–"}
                </code>
              </td>
            </tr>
            <tr>
              <th scope="row" class="nowrap">
                admission
              </th>
              <td data-testid="admission">
                priority {job?.priority ?? 0}
                {job?.run_at ? `, run_at ${job.run_at}` : ""}
                {job?.expires_at ? `, expires_at ${job.expires_at}` : ""}
                {job?.concurrency_key ? `, key ${job.concurrency_key}` : ""}
              </td>
            </tr>
            {run.executions.length > 1 && (
              <tr>
                <th scope="row" class="nowrap">
                  executions seen
                </th>
                <td data-testid="executions-seen">
                  {run.executions.map((x) => `${x.execution_id.slice(0, 8)}@${x.epoch}`).join(", ")}
                </td>
              </tr>
            )}
            {job?.error && (
              <tr>
                <th scope="row" class="nowrap">
                  error
                </th>
                <td>
                  {job.error.code}: {job.error.message}
                </td>
              </tr>
            )}
          </tbody>
        </table>
      </div>
      <h4>Recoveries and retries</h4>
      {recoveries.length === 0 ? (
        <p class="muted">none</p>
      ) : (
        <ul data-testid="recoveries">
          {recoveries.map((r) => (
            <li key={r}>{r}</li>
          ))}
        </ul>
      )}
      <h4>Quota waits</h4>
      {run.quotaWaits.length === 0 ? (
        <p class="muted">none</p>
      ) : (
        <ul data-testid="quota-waits">
          {run.quotaWaits.map((q) => (
            <li key={q.offset}>
              #{q.offset} {q.ts}: {q.reason}
              {q.key ? ` on ${q.key}` : ""}
              {q.ahead !== null ? `, ${q.ahead} ahead` : ""}
            </li>
          ))}
        </ul>
      )}
      <h4>Waits for a person</h4>
      {run.waits.length === 0 ? (
        <p class="muted">none</p>
      ) : (
        <ul data-testid="waits">
          {run.waits.map((w) => (
            <li
              key={w.offset}
              data-suspended={`${w.suspendedIn.execution_id}@${w.suspendedIn.epoch}`}
              data-resumed={w.resumedIn ? `${w.resumedIn.execution_id}@${w.resumedIn.epoch}` : ""}
            >
              #{w.offset} {w.kind} for <code>{w.tool}</code>: suspended execution{" "}
              <code>{w.suspendedIn.execution_id.slice(0, 8)}</code> (epoch {w.suspendedIn.epoch})
              {w.resolved && w.resumedIn ? (
                <>
                  , {w.resolved.decision} by {w.resolved.by} after {w.resolved.waited_ms} ms, resumed as execution{" "}
                  <code>{w.resumedIn.execution_id.slice(0, 8)}</code> (epoch {w.resumedIn.epoch})
                </>
              ) : (
                ", still waiting"
              )}
            </li>
          ))}
        </ul>
      )}
      <h4>Tool calls and sandboxes</h4>
      {run.sandbox.length === 0 ? (
        <p class="muted">none</p>
      ) : (
        <ul data-testid="sandbox-events">
          {run.sandbox.map((s) => (
            <li key={s.offset}>
              #{s.offset} {s.ts}: {s.type} {s.detail}
            </li>
          ))}
        </ul>
      )}
      <h4>Event timeline</h4>
      <table class="timeline" data-testid="timeline">
        <thead>
          <tr>
            <th scope="col">offset</th>
            <th scope="col">seq</th>
            <th scope="col">type</th>
            <th scope="col" class="ts">
              ts
            </th>
            <th scope="col">payload</th>
          </tr>
        </thead>
        <tbody>
          {events.map(({ offset, event }) => (
            <tr key={offset} data-offset={offset}>
              <td>{offset}</td>
              <td>{event.seq}</td>
              <td>{event.type}</td>
              <td class="ts">{event.ts}</td>
              <td>
                <code>{payloadSummary(event)}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

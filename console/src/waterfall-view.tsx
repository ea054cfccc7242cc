/**
 * The run inspector's picture of a run (waterfall.ts): a figure named "Run timeline", one lane per
 * execution headed by why it exists, one row per bar with its label on the left and its place on
 * the run's time axis on the right. Bars are buttons: hovering shows the event that opened the bar,
 * and selecting (click, Enter or Space) keeps it shown, so a keyboard or touch user gets the same
 * payload as a mouse. Positions are percentages of the axis set through the CSSOM (`style` as an
 * object, which the console's CSP allows; a `style` attribute in markup it would not).
 */
import { useState } from "preact/hooks";
import type { JobView } from "./api";
import { ms } from "./debug-panel";
import type { OffsetEvent } from "./run";
import { type Bar, waterfall } from "./waterfall";

const pct = (v: number, span: number) => `${((100 * v) / span).toFixed(3)}%`;

function barText(b: Bar): string {
  const dur = b.open ? `${b.end - b.start} ms so far` : `${b.end - b.start} ms`;
  return [b.label, dur, ...b.marks].join(", ");
}

export function Waterfall({ job, events }: { job: JobView | null; events: readonly OffsetEvent[] }) {
  const w = waterfall(events, job);
  const [selected, setSelected] = useState<string | null>(null);
  const [hovered, setHovered] = useState<string | null>(null);
  const shownKey = hovered ?? selected;
  const all = w.lanes.flatMap((l, li) => l.bars.map((b, bi) => ({ key: `${li}:${bi}`, bar: b })));
  const shown = all.find((x) => x.key === shownKey)?.bar ?? null;
  const shownEvent = shown?.offset != null ? events.find((e) => e.offset === shown.offset)?.event : null;
  return (
    <figure class="waterfall" aria-label="Run timeline" data-testid="waterfall">
      <figcaption>
        <strong>Run timeline</strong>{" "}
        <span data-testid="waterfall-summary">
          {ms(w.totalMs)} from submit; active {ms(w.activeMs)}
          {w.waitingMs > 0 && <>, waiting for a person {ms(w.waitingMs)}</>}
          {w.lanes.length > 1 && <>; {w.lanes.length} executions</>}
        </span>
      </figcaption>
      {w.lanes.length === 0 && <p class="muted">no events yet</p>}
      {w.lanes.map((lane, li) => (
        <section
          key={lane.execution_id}
          class="lane"
          aria-label={`Execution ${li + 1}`}
          data-testid="lane"
          data-execution={lane.execution_id}
          data-epoch={lane.epoch}
        >
          <h4 class="lane-head">
            Execution {li + 1} <span class="muted">(epoch {lane.epoch})</span>:{" "}
            <span data-testid="lane-reason">{lane.reason}</span>
          </h4>
          <ul class="bars">
            {lane.bars.map((b, bi) => {
              const key = `${li}:${bi}`;
              return (
                <li key={key} class="bar-row" data-kind={b.kind} data-tool={b.tool} data-testid="bar">
                  <span class="bar-label">
                    {b.href ? <a href={b.href}>{b.label}</a> : b.label}
                    {b.marks.length > 0 && <span class="bar-marks"> · {b.marks.join(" · ")}</span>}
                  </span>
                  <span class="bar-track">
                    <button
                      type="button"
                      class={`bar bar-${b.kind}${b.tool ? ` bar-tool-${b.tool}` : ""}${b.marks.some((m) => m.startsWith("discarded")) ? " bar-discarded" : ""}`}
                      style={{ left: pct(b.start, w.span), width: pct(b.end - b.start, w.span) }}
                      aria-label={barText(b)}
                      aria-pressed={selected === key}
                      title={barText(b)}
                      onClick={() => setSelected(selected === key ? null : key)}
                      onMouseEnter={() => setHovered(key)}
                      onMouseLeave={() => setHovered(null)}
                    />
                  </span>
                </li>
              );
            })}
          </ul>
        </section>
      ))}
      {shown && (
        <div class="bar-detail" data-testid="bar-detail" aria-live="polite">
          <strong>{barText(shown)}</strong>
          {shownEvent ? (
            <pre data-testid="bar-payload">
              {JSON.stringify(
                { type: shownEvent.type, ts: shownEvent.ts, offset: shown.offset, payload: shownEvent.payload },
                null,
                2,
              )}
            </pre>
          ) : (
            <p class="muted">from the job's created_at {job?.created_at ?? "–"} to its first execution's run.started</p>
          )}
        </div>
      )}
    </figure>
  );
}

/** An answer's body: its text and tool calls in the order they happened, each tool call collapsed with its output. */
import type { Segment } from "./run";

/**
 * A tool's arguments or output. An object is shown field by field, string fields as preformatted
 * text, so a shell's stdout reads as it was printed rather than as a JSON string with `\n`s.
 */
function Value({ value }: { value: unknown }) {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    return (
      <dl class="tool-fields">
        {Object.entries(value).map(([k, v]) => (
          <div key={k} data-key={k}>
            <dt>{k}</dt>
            <dd>{typeof v === "string" ? <pre>{v}</pre> : <code>{JSON.stringify(v)}</code>}</dd>
          </div>
        ))}
      </dl>
    );
  }
  return <pre>{typeof value === "string" ? value : JSON.stringify(value, null, 2)}</pre>;
}

export function AnswerBody({ segments }: { segments: readonly Segment[] }) {
  return (
    <>
      {segments.map((s, i) =>
        s.kind === "text" ? (
          <span key={i} class="text">
            {s.text}
          </span>
        ) : (
          <details key={s.id} class="tool" data-testid="tool-call">
            <summary>
              tool <code>{s.name}</code> {s.result === null ? "running…" : s.result.ok ? "ok" : "error"}
            </summary>
            <h5>arguments</h5>
            <div data-testid="tool-args">
              <Value value={s.args} />
            </div>
            <h5>output</h5>
            <div data-testid="tool-output">{s.result === null ? "–" : <Value value={s.result.output} />}</div>
          </details>
        ),
      )}
    </>
  );
}

/** An answer's body: its text and tool calls in the order they happened, each tool call collapsed with its output. */
import type { Segment } from "./run";

function pretty(v: unknown): string {
  return typeof v === "string" ? v : JSON.stringify(v, null, 2);
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
            <pre>{pretty(s.args)}</pre>
            <h5>output</h5>
            <pre>{s.result === null ? "–" : pretty(s.result.output)}</pre>
          </details>
        ),
      )}
    </>
  );
}

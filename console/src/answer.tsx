/**
 * An answer's body: the run's earlier model turns as steps (their text and tool calls, each tool
 * call collapsed with its output), then the last turn's text, which is the answer; and the facts of its job shown under it in the chat and the inspector alike
 * (agent version, token usage, the structured answer).
 */
import type { JobView } from "./api";
import type { ModelTurn, Segment } from "./run";

/** `name@version`, or null for the built-in default agent. */
export const agentLabel = (job: JobView): string | null =>
  job.agent ? `${job.agent.name}@${job.agent.version}` : null;

/**
 * US dollars as the console shows them: small sums keep six decimals (one model call of a cheap
 * model costs well under a cent); null is "not priced", which is not $0.
 */
export function usd(v: number | null): string {
  if (v === null) return "not priced";
  return `$${v.toFixed(v !== 0 && v < 0.01 ? 6 : 4)}`;
}

/** The job's agent (a link to that version) and its tokens, for an answer's footer or the inspector's line. */
export function RunFacts({ job }: { job: JobView }) {
  const label = agentLabel(job);
  const u = job.usage;
  return (
    <>
      {job.agent && (
        <a data-testid="run-agent" href={`#/agents/${encodeURIComponent(job.agent.name)}/${job.agent.version}`}>
          agent {label}
        </a>
      )}
      {u.model_calls > 0 && (
        <span
          data-testid="run-usage"
          data-prompt={u.prompt_tokens}
          data-completion={u.completion_tokens}
          data-estimated={String(u.estimated)}
        >
          {u.prompt_tokens} prompt + {u.completion_tokens} completion tokens
          {u.estimated && (
            <>
              {" "}
              <abbr class="est" title="estimated: the provider reported no usage for some call">
                (est.)
              </abbr>
            </>
          )}
        </span>
      )}
      {u.model_calls > 0 && (
        <span data-testid="run-cost" data-usd={u.cost_usd ?? ""}>
          cost {usd(u.cost_usd)}
        </span>
      )}
    </>
  );
}

/** The answer parsed against the agent's response_format, pretty-printed. */
export function OutputJson({ job }: { job: JobView }) {
  if (job.output_json === null || job.output_json === undefined) return null;
  return (
    <details class="output-json" open>
      <summary>structured output</summary>
      <pre data-testid="output-json">{JSON.stringify(job.output_json, null, 2)}</pre>
    </details>
  );
}

/**
 * A tool's arguments or output. An object is shown field by field, string fields as preformatted
 * text, so a shell's stdout reads as it was printed rather than as a JSON string with `\n`s.
 */
export function Value({ value }: { value: unknown }) {
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

/** Why an earlier turn is not the answer, read from the reason the next turn started. */
function stepNote(step: ModelTurn, next: ModelTurn | undefined): string {
  if (next?.reason === "repair") return "answer refused by the response format";
  if (next?.reason === "input") return "more input arrived";
  return step.segments.some((s) => s.kind === "tool") ? "called tools" : "";
}

/**
 * The run's model turns: every turn but the last as a step (muted, numbered), then the last
 * turn's segments, whose text spans (`.text`) are the answer exactly. One turn: no steps.
 */
export function AnswerBody({ turns }: { turns: readonly ModelTurn[] }) {
  const steps = turns.slice(0, -1);
  const answer = turns.at(-1);
  return (
    <>
      {steps.length > 0 && (
        <ol class="steps" data-testid="steps" aria-label="Earlier model turns">
          {steps.map((t, i) => {
            const note = stepNote(t, turns[i + 1]);
            return (
              <li key={t.turn ?? `step-${i}`} class="step" data-turn={t.turn ?? ""} data-reason={t.reason ?? ""}>
                <span class="step-head">
                  turn {t.turn ?? i + 1}
                  {note && ` · ${note}`}
                </span>
                <Segments segments={t.segments} textClass="step-text" />
              </li>
            );
          })}
        </ol>
      )}
      {answer && <Segments segments={answer.segments} textClass="text" />}
    </>
  );
}

function Segments({ segments, textClass }: { segments: readonly Segment[]; textClass: string }) {
  return (
    <>
      {segments.map((s, i) =>
        s.kind === "text" ? (
          <span key={i} class={textClass}>
            {s.text}
          </span>
        ) : (
          <details key={s.id} class="tool" data-testid="tool-call">
            <summary>
              {s.runs} tool <code>{s.name}</code> {s.result === null ? "running…" : s.result.ok ? "ok" : "error"}
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

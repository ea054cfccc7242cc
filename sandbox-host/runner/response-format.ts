/**
 * An agent's `response_format`: the JSON Schema its final answer must satisfy. The provider is
 * asked for it (OpenAI's `response_format: json_schema`), but providers differ in how strictly
 * they hold to it, so the host checks the answer itself: parsed as JSON and validated by the same
 * validator the gateway checked the schema with (src/domain/json-schema.ts).
 *
 * The check runs on the offload pool, never on the host's event loop: its cost is the tenant's
 * to choose (a `pattern` or `patternProperties` regex such as `(a+)+$` backtracks for minutes
 * on 30 characters, and JavaScript's matcher cannot be interrupted), and one run stalling the
 * loop would stop every run's heartbeats on the host. The pool's `timeoutMs` ends the thread
 * of a check that runs past ANSWER_CHECK_TIMEOUT_MS; the job then fails `output_invalid`.
 */
import { jsonNestingDepth } from "../../src/domain/json-depth";
import { answerValidator } from "../../src/domain/json-schema";
import type { ModelResponseFormat } from "../model/types";
import { OffloadTimeoutError } from "../offload/offload-errors";
import type { OffloadPool } from "../offload/pool";

/**
 * How long one answer check may run on its thread. A real one takes milliseconds (a 59 KiB
 * schema compiles in ~16 ms on a loaded box, see json-schema.ts); one past this is a runaway.
 */
export const ANSWER_CHECK_TIMEOUT_MS = 2000;

/**
 * The deepest answer checked (arrays and objects). The validator recurses per level (and per
 * recursive `$ref`): a 30,000-deep answer to `{"items": {"$ref": "#"}}` overflowed the stack
 * and ended the job `internal_error`. No structured answer a person wants is this deep.
 */
export const MAX_ANSWER_DEPTH = 512;

/** `final`: no repair turn can help (the check itself could not finish), the job fails now. */
export type AnswerCheck = { ok: true; value: unknown } | { ok: false; problems: string; final?: true };

export interface AnswerFormat {
  /** What the provider is sent. */
  wire: ModelResponseFormat;
  /** Rejects only with the pool's own errors (full, closing, the caller's abort). */
  check(answer: string, signal?: AbortSignal): Promise<AnswerCheck>;
}

/**
 * The format for an agent's schema. `name` is the agent's name (the provider wants a name made of
 * letters, digits, `_` and `-`, which agent names already are).
 */
export function answerFormat(
  name: string,
  schema: Record<string, unknown>,
  offload: Pick<OffloadPool, "run">,
): AnswerFormat {
  return {
    wire: { name, schema },
    async check(answer, signal) {
      try {
        return await offload.run("checkAnswer", [schema, answer], { signal, timeoutMs: ANSWER_CHECK_TIMEOUT_MS });
      } catch (err) {
        if (!(err instanceof OffloadTimeoutError)) throw err;
        return {
          ok: false,
          final: true,
          problems: `the schema check timed out after ${err.timeoutMs} ms (a pattern in the schema that backtracks on this answer?) and was stopped`,
        };
      }
    },
  };
}

/**
 * The check itself, run by the offload task `checkAnswer` (offload/tasks.ts) on a worker
 * thread: the schema is compiled there too, so nothing of it runs on the loop.
 */
export function checkAnswerNow(schema: Record<string, unknown>, answer: string): AnswerCheck {
  const text = unfenced(answer);
  const depth = jsonNestingDepth(text);
  if (depth > MAX_ANSWER_DEPTH) {
    return { ok: false, problems: `the answer nests ${depth} levels deep; at most ${MAX_ANSWER_DEPTH} are checked` };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { ok: false, problems: `the reply is not JSON (${err instanceof Error ? err.message : String(err)})` };
  }
  const problem = answerValidator(schema)(value);
  return problem === null ? { ok: true, value } : { ok: false, problems: problem };
}

/**
 * The answer without a Markdown code fence around it: models asked for JSON still wrap it in
 * ```json … ``` often enough that refusing those would spend a repair turn on formatting.
 */
function unfenced(answer: string): string {
  const m = /^\s*```[A-Za-z0-9_-]*\s*\n([\s\S]*?)\n?```\s*$/.exec(answer);
  return m?.[1] ?? answer;
}

/** The repair turn's message: what was wrong, and what to send instead. */
export function repairMessage(problems: string): string {
  return `Your previous reply does not satisfy the required JSON Schema: ${problems}. Reply again with only a JSON value that satisfies the schema, and nothing else.`;
}

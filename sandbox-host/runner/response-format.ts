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
import type { ModelResponseFormat } from "../model/types";
import { OffloadTimeoutError } from "../offload/offload-errors";
import type { OffloadPool } from "../offload/pool";
import type { AnswerCheck } from "./answer-check";

/**
 * How long one answer check may run on its thread. A real one takes milliseconds (a 59 KiB
 * schema compiles in ~16 ms on a loaded box, see json-schema.ts); one past this is a runaway.
 */
export const ANSWER_CHECK_TIMEOUT_MS = 2000;

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

/** The repair turn's message: what was wrong, and what to send instead. */
export function repairMessage(problems: string): string {
  return `Your previous reply does not satisfy the required JSON Schema: ${problems}. Reply again with only a JSON value that satisfies the schema, and nothing else.`;
}

/**
 * The check of a final answer against an agent's `response_format` schema, as it runs on an
 * offload thread (offload/tasks.ts, task `checkAnswer`): why it runs there is response-format.ts'
 * to say. Kept apart from response-format.ts, which hands the check to the pool, so the worker's
 * task table does not import the pool it is run by.
 */
import { jsonNestingDepth } from "../../src/domain/json-depth";
import { answerValidator } from "../../src/domain/json-schema";

/**
 * The deepest answer checked (arrays and objects). The validator recurses per level (and per
 * recursive `$ref`): a 30,000-deep answer to `{"items": {"$ref": "#"}}` overflowed the stack
 * and ended the job `internal_error`. No structured answer a person wants is this deep.
 */
export const MAX_ANSWER_DEPTH = 512;

/** `final`: no repair turn can help (the check itself could not finish), the job fails now. */
export type AnswerCheck = { ok: true; value: unknown } | { ok: false; problems: string; final?: true };

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

/**
 * An agent's `response_format`: the JSON Schema its final answer must satisfy. The provider is
 * asked for it (OpenAI's `response_format: json_schema`), but providers differ in how strictly
 * they hold to it, so the host checks the answer itself: parsed as JSON and validated by the same
 * validator the gateway checked the schema with (src/domain/json-schema.ts).
 */
import { answerValidator } from "../../src/domain/json-schema";
import type { ModelResponseFormat } from "../model/types";

export type AnswerCheck = { ok: true; value: unknown } | { ok: false; problems: string };

export interface AnswerFormat {
  /** What the provider is sent. */
  wire: ModelResponseFormat;
  check(answer: string): AnswerCheck;
}

/**
 * The format for an agent's schema. `name` is the agent's name (the provider wants a name made of
 * letters, digits, `_` and `-`, which agent names already are).
 */
export function answerFormat(name: string, schema: Record<string, unknown>): AnswerFormat {
  const problemOf = answerValidator(schema);
  return {
    wire: { name, schema },
    check(answer) {
      let value: unknown;
      try {
        value = JSON.parse(unfenced(answer));
      } catch (err) {
        return { ok: false, problems: `the reply is not JSON (${err instanceof Error ? err.message : String(err)})` };
      }
      const problem = problemOf(value);
      return problem === null ? { ok: true, value } : { ok: false, problems: problem };
    },
  };
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

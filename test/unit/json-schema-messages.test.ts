/**
 * The output_invalid messages a person reads (src/domain/json-schema-messages.ts, through
 * answerValidator): each common keyword's failure said in words, at its place in the answer.
 */
import { describe, expect, it } from "vitest";
import { answerValidator, jsonSchemaProblem } from "../../src/domain/json-schema";

const schema = {
  $defs: { upper: { type: "string", pattern: "^[A-Z]" } },
  type: "object",
  properties: {
    title: { $ref: "#/$defs/upper", minLength: 2, maxLength: 5 },
    score: { type: "integer", minimum: 0, maximum: 10 },
    ratio: { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1, multipleOf: 0.25 },
    kind: { enum: ["a", "b"] },
    version: { const: 1 },
    when: { type: "string", format: "date-time" },
    tags: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 2, uniqueItems: true },
    pair: { type: "array", prefixItems: [{ type: "string" }], items: false },
    note: { type: ["string", "null"] },
    "a/b": { type: "boolean" },
  },
  required: ["title", "score"],
  additionalProperties: false,
  dependentRequired: { ratio: ["kind"] },
};
const problemOf = answerValidator(schema);
const base = { title: "Ok", score: 1 };

describe("output_invalid messages", () => {
  it.each([
    [{ ...base, temperature: 0.3 }, 'unexpected property "temperature"'],
    [{ title: "Ok" }, 'missing required property "score"'],
    [{ ...base, score: "1" }, "score: expected an integer, got a string"],
    [{ ...base, score: 1.5 }, "score: expected an integer, got a number"],
    [{ ...base, note: 3 }, "note: expected a string or a null, got an integer"],
    ["text", "expected an object, got a string"],
    [{ ...base, kind: "z" }, 'kind: must be one of "a", "b" (got "z")'],
    [{ ...base, version: 2 }, "version: must be 1"],
    [{ ...base, title: "ok" }, 'title: must match the pattern "^[A-Z]"'],
    [{ ...base, title: "O" }, "title: must be at least 2 characters long (got 1)"],
    [{ ...base, title: "Oooooo" }, "title: must be at most 5 characters long (got 6)"],
    [{ ...base, score: -1 }, "score: must be at least 0 (got -1)"],
    [{ ...base, score: 11 }, "score: must be at most 10 (got 11)"],
    [{ ...base, kind: "a", ratio: 0 }, "ratio: must be greater than 0 (got 0)"],
    [{ ...base, kind: "a", ratio: 1 }, "ratio: must be less than 1 (got 1)"],
    [{ ...base, kind: "a", ratio: 0.3 }, "ratio: must be a multiple of 0.25 (got 0.3)"],
    [{ ...base, when: "yesterday" }, "when: must be a valid date-time"],
    [{ ...base, tags: [] }, "tags: must have at least 1 items (got 0)"],
    [{ ...base, tags: ["a", "b", "c"] }, "tags: must have at most 2 items (got 3)"],
    [{ ...base, tags: ["a", "a"] }, "tags: items 0 and 1 are the same; items must be unique"],
    [{ ...base, pair: ["a", "b"] }, "pair: unexpected item at index 1"],
    [{ ...base, ratio: 0.5 }, '"kind" is required when "ratio" is present'],
    [{ ...base, "a/b": 1 }, "a/b: expected a boolean, got an integer"],
  ])("%j → %s", (answer, message) => {
    expect(problemOf(answer)).toBe(message);
  });

  it("says where a nested property is unexpected", () => {
    const nested = answerValidator({
      type: "object",
      properties: { items: { type: "array", items: { type: "object", additionalProperties: false } } },
    });
    expect(nested({ items: [{}, { extra: 1 }] })).toBe('items/1: unexpected property "extra"');
  });

  it("still names the keyword at fault in a schema that is not one", () => {
    expect(jsonSchemaProblem({ type: "objectx" })).toBe(
      'type: must be one of "array", "boolean", "integer", "null", "number", "object", "string" (got "objectx")',
    );
    expect(jsonSchemaProblem({ properties: { n: { minimum: "zero" } } })).toBe(
      "properties/n/minimum: expected a number, got a string",
    );
    expect(jsonSchemaProblem({ additionalProperties: 5 })).toBe(
      "additionalProperties: expected an object or a boolean, got an integer",
    );
  });
});

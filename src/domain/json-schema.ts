/**
 * JSON Schema as agents use it (an agent version's `response_format`): checking that a schema a
 * client sends is a valid draft 2020-12 schema, and validating an answer against it. Uses
 * @cfworker/json-schema, which interprets schemas instead of compiling them to code (workerd
 * forbids `new Function`, which Ajv needs), so the gateway and the hosts run the same validator.
 * Interpreting costs CPU on the gateway, once per agent version written: measured in Node on a
 * loaded machine (loadavg ~13), 0.07 ms for a two-field schema, ~16 ms (median) for a 59 KiB
 * one of 800 properties, near the definition's 64 KiB cap.
 */
import { Validator } from "@cfworker/json-schema";
import { describeFailure } from "./json-schema-messages";

/** The dialect a response_format is read in (and the only `$schema` it may declare). */
export const JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema";

/**
 * The draft 2020-12 meta-schema and its seven vocabularies (json-schema.org, as published),
 * with one change: each `{"$dynamicRef": "#meta"}` is a plain `$ref` to the meta-schema.
 * @cfworker/json-schema does not follow `$dynamicRef` into nested subschemas (measured: with the
 * published text, `{"items": {"type": "nah"}}` passed), and since nothing extends this
 * meta-schema the dynamic reference always lands on it anyway.
 */
const META_SCHEMAS: readonly Record<string, unknown>[] = [
  {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://json-schema.org/draft/2020-12/schema",
    $vocabulary: {
      "https://json-schema.org/draft/2020-12/vocab/core": true,
      "https://json-schema.org/draft/2020-12/vocab/applicator": true,
      "https://json-schema.org/draft/2020-12/vocab/unevaluated": true,
      "https://json-schema.org/draft/2020-12/vocab/validation": true,
      "https://json-schema.org/draft/2020-12/vocab/meta-data": true,
      "https://json-schema.org/draft/2020-12/vocab/format-annotation": true,
      "https://json-schema.org/draft/2020-12/vocab/content": true,
    },
    title: "Core and Validation specifications meta-schema",
    allOf: [
      { $ref: "meta/core" },
      { $ref: "meta/applicator" },
      { $ref: "meta/unevaluated" },
      { $ref: "meta/validation" },
      { $ref: "meta/meta-data" },
      { $ref: "meta/format-annotation" },
      { $ref: "meta/content" },
    ],
    type: ["object", "boolean"],
    $comment:
      "This meta-schema also defines keywords that have appeared in previous drafts in order to prevent incompatible extensions as they remain in common use.",
    properties: {
      definitions: {
        $comment: '"definitions" has been replaced by "$defs".',
        type: "object",
        additionalProperties: { $ref: "https://json-schema.org/draft/2020-12/schema" },
        deprecated: true,
        default: {},
      },
      dependencies: {
        $comment:
          '"dependencies" has been split and replaced by "dependentSchemas" and "dependentRequired" in order to serve their differing semantics.',
        type: "object",
        additionalProperties: {
          anyOf: [
            { $ref: "https://json-schema.org/draft/2020-12/schema" },
            { $ref: "meta/validation#/$defs/stringArray" },
          ],
        },
        deprecated: true,
        default: {},
      },
      $recursiveAnchor: {
        $comment: '"$recursiveAnchor" has been replaced by "$dynamicAnchor".',
        $ref: "meta/core#/$defs/anchorString",
        deprecated: true,
      },
      $recursiveRef: {
        $comment: '"$recursiveRef" has been replaced by "$dynamicRef".',
        $ref: "meta/core#/$defs/uriReferenceString",
        deprecated: true,
      },
    },
  },
  {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://json-schema.org/draft/2020-12/meta/applicator",
    $vocabulary: { "https://json-schema.org/draft/2020-12/vocab/applicator": true },
    title: "Applicator vocabulary meta-schema",
    type: ["object", "boolean"],
    properties: {
      prefixItems: { $ref: "#/$defs/schemaArray" },
      items: { $ref: "https://json-schema.org/draft/2020-12/schema" },
      contains: { $ref: "https://json-schema.org/draft/2020-12/schema" },
      additionalProperties: { $ref: "https://json-schema.org/draft/2020-12/schema" },
      properties: {
        type: "object",
        additionalProperties: { $ref: "https://json-schema.org/draft/2020-12/schema" },
        default: {},
      },
      patternProperties: {
        type: "object",
        additionalProperties: { $ref: "https://json-schema.org/draft/2020-12/schema" },
        propertyNames: { format: "regex" },
        default: {},
      },
      dependentSchemas: {
        type: "object",
        additionalProperties: { $ref: "https://json-schema.org/draft/2020-12/schema" },
        default: {},
      },
      propertyNames: { $ref: "https://json-schema.org/draft/2020-12/schema" },
      if: { $ref: "https://json-schema.org/draft/2020-12/schema" },
      // biome-ignore lint/suspicious/noThenProperty: `then` is a JSON Schema keyword
      then: { $ref: "https://json-schema.org/draft/2020-12/schema" },
      else: { $ref: "https://json-schema.org/draft/2020-12/schema" },
      allOf: { $ref: "#/$defs/schemaArray" },
      anyOf: { $ref: "#/$defs/schemaArray" },
      oneOf: { $ref: "#/$defs/schemaArray" },
      not: { $ref: "https://json-schema.org/draft/2020-12/schema" },
    },
    $defs: {
      schemaArray: { type: "array", minItems: 1, items: { $ref: "https://json-schema.org/draft/2020-12/schema" } },
    },
  },
  {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://json-schema.org/draft/2020-12/meta/content",
    $vocabulary: { "https://json-schema.org/draft/2020-12/vocab/content": true },
    title: "Content vocabulary meta-schema",
    type: ["object", "boolean"],
    properties: {
      contentEncoding: { type: "string" },
      contentMediaType: { type: "string" },
      contentSchema: { $ref: "https://json-schema.org/draft/2020-12/schema" },
    },
  },
  {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://json-schema.org/draft/2020-12/meta/core",
    $vocabulary: { "https://json-schema.org/draft/2020-12/vocab/core": true },
    title: "Core vocabulary meta-schema",
    type: ["object", "boolean"],
    properties: {
      $id: { $ref: "#/$defs/uriReferenceString", $comment: "Non-empty fragments not allowed.", pattern: "^[^#]*#?$" },
      $schema: { $ref: "#/$defs/uriString" },
      $ref: { $ref: "#/$defs/uriReferenceString" },
      $anchor: { $ref: "#/$defs/anchorString" },
      $dynamicRef: { $ref: "#/$defs/uriReferenceString" },
      $dynamicAnchor: { $ref: "#/$defs/anchorString" },
      $vocabulary: {
        type: "object",
        propertyNames: { $ref: "#/$defs/uriString" },
        additionalProperties: { type: "boolean" },
      },
      $comment: { type: "string" },
      $defs: { type: "object", additionalProperties: { $ref: "https://json-schema.org/draft/2020-12/schema" } },
    },
    $defs: {
      anchorString: { type: "string", pattern: "^[A-Za-z_][-A-Za-z0-9._]*$" },
      uriString: { type: "string", format: "uri" },
      uriReferenceString: { type: "string", format: "uri-reference" },
    },
  },
  {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://json-schema.org/draft/2020-12/meta/format-annotation",
    $vocabulary: { "https://json-schema.org/draft/2020-12/vocab/format-annotation": true },
    title: "Format vocabulary meta-schema for annotation results",
    type: ["object", "boolean"],
    properties: { format: { type: "string" } },
  },
  {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://json-schema.org/draft/2020-12/meta/meta-data",
    $vocabulary: { "https://json-schema.org/draft/2020-12/vocab/meta-data": true },
    title: "Meta-data vocabulary meta-schema",
    type: ["object", "boolean"],
    properties: {
      title: { type: "string" },
      description: { type: "string" },
      default: true,
      deprecated: { type: "boolean", default: false },
      readOnly: { type: "boolean", default: false },
      writeOnly: { type: "boolean", default: false },
      examples: { type: "array", items: true },
    },
  },
  {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://json-schema.org/draft/2020-12/meta/unevaluated",
    $vocabulary: { "https://json-schema.org/draft/2020-12/vocab/unevaluated": true },
    title: "Unevaluated applicator vocabulary meta-schema",
    type: ["object", "boolean"],
    properties: {
      unevaluatedItems: { $ref: "https://json-schema.org/draft/2020-12/schema" },
      unevaluatedProperties: { $ref: "https://json-schema.org/draft/2020-12/schema" },
    },
  },
  {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    $id: "https://json-schema.org/draft/2020-12/meta/validation",
    $vocabulary: { "https://json-schema.org/draft/2020-12/vocab/validation": true },
    title: "Validation vocabulary meta-schema",
    type: ["object", "boolean"],
    properties: {
      type: {
        anyOf: [
          { $ref: "#/$defs/simpleTypes" },
          { type: "array", items: { $ref: "#/$defs/simpleTypes" }, minItems: 1, uniqueItems: true },
        ],
      },
      const: true,
      enum: { type: "array", items: true },
      multipleOf: { type: "number", exclusiveMinimum: 0 },
      maximum: { type: "number" },
      exclusiveMaximum: { type: "number" },
      minimum: { type: "number" },
      exclusiveMinimum: { type: "number" },
      maxLength: { $ref: "#/$defs/nonNegativeInteger" },
      minLength: { $ref: "#/$defs/nonNegativeIntegerDefault0" },
      pattern: { type: "string", format: "regex" },
      maxItems: { $ref: "#/$defs/nonNegativeInteger" },
      minItems: { $ref: "#/$defs/nonNegativeIntegerDefault0" },
      uniqueItems: { type: "boolean", default: false },
      maxContains: { $ref: "#/$defs/nonNegativeInteger" },
      minContains: { $ref: "#/$defs/nonNegativeInteger", default: 1 },
      maxProperties: { $ref: "#/$defs/nonNegativeInteger" },
      minProperties: { $ref: "#/$defs/nonNegativeIntegerDefault0" },
      required: { $ref: "#/$defs/stringArray" },
      dependentRequired: { type: "object", additionalProperties: { $ref: "#/$defs/stringArray" } },
    },
    $defs: {
      nonNegativeInteger: { type: "integer", minimum: 0 },
      nonNegativeIntegerDefault0: { $ref: "#/$defs/nonNegativeInteger", default: 0 },
      simpleTypes: { enum: ["array", "boolean", "integer", "null", "number", "object", "string"] },
      stringArray: { type: "array", items: { type: "string" }, uniqueItems: true, default: [] },
    },
  },
];

let metaValidator: Validator | undefined;

function meta(): Validator {
  if (!metaValidator) {
    const [root, ...vocabularies] = META_SCHEMAS as [Record<string, unknown>, ...Record<string, unknown>[]];
    metaValidator = new Validator(root, "2020-12");
    for (const v of vocabularies) metaValidator.addSchema(v);
  }
  return metaValidator;
}

/**
 * Why `schema` is not a usable draft 2020-12 JSON Schema, or null when it is: it must satisfy the
 * meta-schema, declare no other dialect, and every `$ref` must resolve inside the schema itself
 * (a remote reference would make validating an answer depend on another server).
 */
export function jsonSchemaProblem(schema: unknown): string | null {
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) return "must be a JSON object";
  const declared = (schema as { $schema?: unknown }).$schema;
  if (declared !== undefined && declared !== JSON_SCHEMA_DIALECT) {
    return `$schema: only ${JSON_SCHEMA_DIALECT} is supported (omit it to mean the same)`;
  }
  const result = meta().validate(schema);
  // The meta-schema's own keyword values sit behind references to other vocabularies: the
  // messages fall back to the library's words where they cannot be read.
  if (!result.valid) return describeFailure(result.errors, META_SCHEMAS[0], schema);
  try {
    // Validating any value resolves the references on the way; an unresolved one throws.
    new Validator(schema as Record<string, unknown>, "2020-12", false).validate(null);
  } catch (err) {
    // The library's message goes on to list its own base URI and known schemas: keep the first sentence.
    const message = err instanceof Error ? err.message : String(err);
    return (message.split("\n")[0] as string).split("  ")[0] as string;
  }
  return null;
}

/** Validates answers against a schema jsonSchemaProblem accepted: null when `value` satisfies it, else why not. */
export function answerValidator(schema: Record<string, unknown>): (value: unknown) => string | null {
  const validator = new Validator(schema, "2020-12");
  return (value) => {
    const result = validator.validate(value);
    return result.valid ? null : describeFailure(result.errors, schema, value);
  };
}

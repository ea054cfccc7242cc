/**
 * What a person reads when a value fails a JSON Schema (an answer against an agent's
 * `response_format`, a schema against the meta-schema). @cfworker/json-schema's own messages
 * name the machinery, not the mistake: `additionalProperties: false` reads "temperature: False
 * boolean schema.", a pattern failure does not say which pattern. Here the failure is said in
 * words, with the schema's value and, where it helps, the value that was given.
 */
import type { OutputUnit } from "@cfworker/json-schema";

/** Keywords whose failure only says that a subschema failed; the subschema's own failure says why. */
const WRAPPERS = new Set([
  "$ref",
  "allOf",
  "anyOf",
  "oneOf",
  "properties",
  "additionalProperties",
  "items",
  "prefixItems",
]);

/** A `false` schema under these refuses a property the schema does not list. */
const PROPERTY_REFUSERS = new Set(["additionalProperties", "unevaluatedProperties", "patternProperties"]);
/** A `false` schema under these refuses an array item past the listed ones. */
const ITEM_REFUSERS = new Set(["items", "prefixItems", "additionalItems", "unevaluatedItems"]);

/**
 * The failure to tell: the first real one at the deepest place in the document (the outer ones
 * only say "a subschema had errors"; of an `anyOf`'s branches, the first is the intended
 * reading, e.g. the type-name enum before "or an array of them"), as `path: what is wrong`.
 */
export function describeFailure(errors: readonly OutputUnit[], schema: unknown, instance: unknown): string {
  const depth = Math.max(...errors.map((e) => e.instanceLocation.length));
  const deepest = errors.filter((e) => e.instanceLocation.length === depth);
  const inner = deepest.find((e) => !WRAPPERS.has(e.keyword)) ?? deepest[deepest.length - 1];
  if (!inner) return "invalid";
  let where = segments(inner.instanceLocation);
  let what: string;
  if (inner.keyword === "false") {
    // The unit before a `false` one is the keyword that applied it, one level up.
    const parent = errors[errors.indexOf(inner) - 1];
    const name = where[where.length - 1] ?? "";
    if (parent && PROPERTY_REFUSERS.has(parent.keyword)) {
      where = where.slice(0, -1);
      what = `unexpected property ${JSON.stringify(name)}`;
    } else if (parent && ITEM_REFUSERS.has(parent.keyword)) {
      where = where.slice(0, -1);
      what = `unexpected item at index ${name}`;
    } else what = "no value is allowed here";
  } else {
    what = phrase(inner, valueAt(schema, inner.keywordLocation, schema), valueAt(instance, inner.instanceLocation));
  }
  return where.length === 0 ? what : `${where.join("/")}: ${what}`;
}

function phrase(unit: OutputUnit, keywordValue: unknown, given: unknown): string {
  const quoted = /"((?:[^"\\]|\\.)*)"/.exec(unit.error)?.[1];
  const limit = typeof keywordValue === "number" ? keywordValue : undefined;
  const got = (shown: unknown) => (shown === undefined ? "" : ` (got ${shown})`);
  const length = typeof given === "string" || Array.isArray(given) ? given.length : undefined;
  switch (unit.keyword) {
    case "required":
      return quoted === undefined ? unit.error : `missing required property ${JSON.stringify(quoted)}`;
    case "type": {
      // Unreadable from the schema (behind a remote reference): the library's message lists them.
      const listed = /Expected (.*)\.$/.exec(unit.error)?.[1]?.match(/[a-z]+/g);
      const value = keywordValue ?? listed;
      const wanted = Array.isArray(value) ? value : [value];
      if (!wanted.every((t) => typeof t === "string")) break;
      return `expected ${wanted.map(withArticle).join(" or ")}, got ${withArticle(typeName(given))}`;
    }
    case "const":
      return `must be ${JSON.stringify(keywordValue)}`;
    case "enum": {
      const values = keywordValue ?? enumOfMessage(unit.error);
      if (!Array.isArray(values)) break;
      return `must be one of ${values
        .slice(0, 10)
        .map((v) => JSON.stringify(v))
        .join(", ")}${values.length > 10 ? ", …" : ""}${got(JSON.stringify(given))}`;
    }
    case "pattern":
      return typeof keywordValue === "string"
        ? `must match the pattern ${JSON.stringify(keywordValue)}`
        : "does not match the schema's pattern";
    case "format":
      return `must be a valid ${typeof keywordValue === "string" ? keywordValue : "value of its format"}`;
    case "minimum":
      if (limit === undefined) break;
      return `must be at least ${limit}${got(given)}`;
    case "maximum":
      if (limit === undefined) break;
      return `must be at most ${limit}${got(given)}`;
    case "exclusiveMinimum":
      if (limit === undefined) break;
      return `must be greater than ${limit}${got(given)}`;
    case "exclusiveMaximum":
      if (limit === undefined) break;
      return `must be less than ${limit}${got(given)}`;
    case "multipleOf":
      if (limit === undefined) break;
      return `must be a multiple of ${limit}${got(given)}`;
    case "minLength":
      if (limit === undefined) break;
      return `must be at least ${limit} characters long${got(length)}`;
    case "maxLength":
      if (limit === undefined) break;
      return `must be at most ${limit} characters long${got(length)}`;
    case "minItems":
      if (limit === undefined) break;
      return `must have at least ${limit} items${got(length)}`;
    case "maxItems":
      if (limit === undefined) break;
      return `must have at most ${limit} items${got(length)}`;
    case "minProperties":
      if (limit === undefined) break;
      return `must have at least ${limit} properties`;
    case "maxProperties":
      if (limit === undefined) break;
      return `must have at most ${limit} properties`;
    case "uniqueItems": {
      const at = /indexes (\d+) and (\d+)/.exec(unit.error);
      return at ? `items ${at[1]} and ${at[2]} are the same; items must be unique` : "items must be unique";
    }
    case "dependentRequired": {
      const [, has, needs] = /has "(.*)" but does not have "(.*)"/.exec(unit.error) ?? [];
      if (has === undefined) break;
      return `${JSON.stringify(needs)} is required when ${JSON.stringify(has)} is present`;
    }
    case "not":
      return "must not match the schema under `not`";
  }
  // Anything else (anyOf, oneOf, if/then, contains, …): the library's words.
  return unit.error.replace(/\.$/, "");
}

/** The values the library lists in "Instance does not match any of [...]." */
function enumOfMessage(error: string): unknown {
  try {
    return JSON.parse(/any of (.*)\.$/.exec(error)?.[1] ?? "");
  } catch {
    return undefined;
  }
}

function withArticle(type: string): string {
  return `${/^[aeiou]/.test(type) ? "an" : "a"} ${type}`;
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

/** A location's segments ("#/a/0/b" → ["a", "0", "b"]), JSON Pointer escapes undone. */
function segments(location: string): string[] {
  const path = location.replace(/^#\/?/, "");
  if (path === "") return [];
  return path.split("/").map((s) => {
    let decoded = s;
    try {
      decoded = decodeURIComponent(s);
    } catch {}
    return decoded.replace(/~1/g, "/").replace(/~0/g, "~");
  });
}

/**
 * The value at a location. A keyword location walks through `$ref`s (a location like
 * `#/properties/title/$ref/pattern`): a local reference (`#/…`) is followed from `root`; any
 * other reference (an `$id`, an anchor) is not, and the value is then unknown.
 */
function valueAt(doc: unknown, location: string, root?: unknown): unknown {
  let at: unknown = doc;
  for (const s of segments(location)) {
    if (root !== undefined && s === "$ref" && isObject(at) && typeof at.$ref === "string") {
      if (!at.$ref.startsWith("#")) return undefined;
      at = valueAt(root, at.$ref, root);
      continue;
    }
    if (Array.isArray(at)) at = at[Number(s)];
    else if (isObject(at)) at = Object.hasOwn(at, s) ? at[s] : undefined;
    else return undefined;
  }
  return at;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

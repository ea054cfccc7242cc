/**
 * The rules for text Postgres cannot store: `text` and `jsonb` cannot hold U+0000, and `jsonb`
 * (and any UTF-8 encoder) refuses a lone UTF-16 surrogate, which JSON's `\ud800` escape lets a
 * client smuggle past the gateway's UTF-8 check.
 *
 * - What a client sends is refused: such a value would pass validation and then fail inside the
 *   INSERT as a 500; refused here it is a 400 that names the field. Every request schema's string
 *   fields use `text()`, and free-form JSON (metadata) is walked with `refineStorableJson`, keys
 *   included.
 * - What a model or a tool produced cannot be refused (there is nobody to answer a 400 to), so a
 *   host replaces each such code unit with U+FFFD (`storable`), in every event it emits and in
 *   every row it writes. Before, one NUL in an answer made the terminal write fail and the job
 *   end `lost` with its output gone (and failed the other runs group-committed with it).
 */
import { z } from "zod";

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export const UNSTORABLE_TEXT_MESSAGE = "must not contain a NUL character (\\u0000) or an unpaired UTF-16 surrogate";

export function isStorableText(s: string): boolean {
  return !s.includes("\u0000") && !LONE_SURROGATE.test(s);
}

/** What a host writes in place of each NUL and each lone surrogate: the Unicode replacement character. */
export const REPLACEMENT_CHARACTER = "\uFFFD";

const UNSTORABLE_GLOBAL = new RegExp(`\u0000|${LONE_SURROGATE.source}`, "g");

/** `s` with every NUL and lone surrogate replaced by U+FFFD (the same string when there is none). */
const encoder = new TextEncoder();
/** A string's size in UTF-8 bytes, as a request body or a Postgres column counts it. */
export const utf8Bytes = (s: string): number => encoder.encode(s).byteLength;

export function storableText(s: string): string {
  return isStorableText(s) ? s : s.replace(UNSTORABLE_GLOBAL, REPLACEMENT_CHARACTER);
}

/**
 * A JSON-like value (strings, arrays, plain objects, keys included) with every string made
 * storable: the one function every host write of model- or tool-produced text goes through
 * (the outbox's `emit`, the terminal write, the suspend). A value with nothing to replace comes
 * back as the same object, uncopied; otherwise only the containers on a changed path are copied.
 */
export function storable<T>(value: T): T {
  if (typeof value === "string") return storableText(value) as T;
  if (Array.isArray(value)) {
    let out: unknown[] | null = null;
    for (let i = 0; i < value.length; i++) {
      const v = storable(value[i]);
      if (v === value[i]) continue;
      out ??= value.slice();
      out[i] = v;
    }
    return (out ?? value) as T;
  }
  if (value === null || typeof value !== "object" || Object.getPrototypeOf(value) !== Object.prototype) return value;
  let out: Record<string, unknown> | null = null;
  for (const [k, v] of Object.entries(value)) {
    const key = storableText(k);
    const next = storable(v);
    if (key === k && next === v) continue;
    out ??= { ...(value as Record<string, unknown>) };
    if (key !== k) delete out[k];
    out[key] = next;
  }
  return (out ?? value) as T;
}

/** A string schema that refuses what Postgres cannot store; chain `.min()`, `.max()`, `.regex()` as usual. */
export function text() {
  return z.string().refine(isStorableText, UNSTORABLE_TEXT_MESSAGE);
}

export interface UnstorableAt {
  path: PropertyKey[];
  /** A key is reported at its object's path: the key itself is not echoed back. */
  isKey: boolean;
}

/**
 * How deeply a client's free-form JSON (metadata, an agent's response_format) may nest objects
 * and arrays. The walks over such a value (the check below, JSON.stringify, a JSON Schema
 * validator) recurse once per level: measured in Node, a schema nested 1,000 levels overflowed
 * the validator's stack and 20,000 overflowed JSON.stringify, which the gateway would answer with
 * a 500, while a body of 256 KiB can nest ~40,000 levels. 64 is far beyond real metadata and schemas.
 */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests more than `max` objects/arrays inside each other (iterative: no recursion to overflow). */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const [v, depth] = item;
    if (v === null || typeof v !== "object") continue;
    if (depth > max) return true;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return false;
}

/**
 * For a refinement that serializes the value (a size check): run it only when the value passed
 * every check so far, so a value refused as too deep is never handed to JSON.stringify.
 */
export const whenValid = { when: (payload: { issues: readonly unknown[] }) => payload.issues.length === 0 };

/** Where the first unstorable string (object keys included) inside a JSON value is, or null. */
export function findUnstorable(value: unknown, path: PropertyKey[] = []): UnstorableAt | null {
  if (typeof value === "string") return isStorableText(value) ? null : { path, isKey: false };
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findUnstorable(value[i], [...path, i]);
      if (found) return found;
    }
    return null;
  }
  if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      if (!isStorableText(k)) return { path, isKey: true };
      const found = findUnstorable(v, [...path, k]);
      if (found) return found;
    }
  }
  return null;
}

/**
 * For `.superRefine`: refuses a free-form JSON value nested deeper than MAX_JSON_DEPTH, and
 * reports its first unstorable string at that string's own path.
 */
export function refineStorableJson(value: unknown, ctx: z.RefinementCtx): void {
  if (nestsDeeperThan(value, MAX_JSON_DEPTH)) {
    ctx.addIssue({ code: "custom", message: `nests objects and arrays more than ${MAX_JSON_DEPTH} levels deep` });
    return;
  }
  const found = findUnstorable(value);
  if (!found) return;
  const message = found.isKey ? `a key ${UNSTORABLE_TEXT_MESSAGE}` : UNSTORABLE_TEXT_MESSAGE;
  ctx.addIssue({ code: "custom", message, path: found.path });
}

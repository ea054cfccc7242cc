/**
 * The one way the gateway turns an error into log text. Logs must never carry SQL parameters or
 * user content: drizzle's "Failed query: …\nparams: …" message copies every bound value (job
 * input, metadata, API-key hashes) and Postgres' data-exception messages quote the offending
 * value (`invalid input syntax for type uuid: "…"`). What stays: each error's name and message
 * down the `cause` chain with those parts cut, the SQLSTATE, and a short stack for 5xx.
 */

/** SQLSTATE classes whose message quotes the value it refused: 22 data exception, 23 integrity. */
const VALUE_ECHOING_SQLSTATE = /^(22|23)/;
const MAX_DEPTH = 5;

function sqlStateOf(e: unknown): string | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

function messageOf(e: unknown): string {
  if (!(e instanceof Error)) return typeof e === "string" ? "(non-Error thrown)" : `(non-Error thrown: ${typeof e})`;
  let message = e.message.replace(/\n?params:[\s\S]*$/, "");
  const state = sqlStateOf(e);
  if (state) {
    // Keep the words, drop what follows the first colon ("…for type uuid: <value>").
    if (VALUE_ECHOING_SQLSTATE.test(state)) message = message.replace(/:[\s\S]*$/, ": (value omitted)");
    message = `${message} [SQLSTATE ${state}]`;
  }
  return `${e.name}: ${message}`;
}

/** One line for a log field: the cause chain, outermost first, joined by " <- ". */
export function loggableError(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e && depth < MAX_DEPTH; e = (e as { cause?: unknown }).cause, depth++) {
    parts.push(messageOf(e));
  }
  return parts.join(" <- ");
}

/** A few frames of the innermost error's stack (file:line only, no values). */
export function loggableStack(err: unknown): string | undefined {
  let deepest: unknown = err;
  for (let e: unknown = err, depth = 0; e && depth < MAX_DEPTH; e = (e as { cause?: unknown }).cause, depth++) {
    deepest = e;
  }
  return deepest instanceof Error ? deepest.stack?.split("\n").slice(1, 6).join("\n") : undefined;
}

/** Fields of one log line. An `error` field is always written through loggableError. */
export type LogFields = Record<string, unknown>;

export interface Logger {
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

function line(msg: string, fields: LogFields | undefined): string {
  if (fields?.error === undefined) return JSON.stringify({ msg, ...fields });
  return JSON.stringify({ msg, ...fields, error: loggableError(fields.error) });
}

/**
 * The gateway's logger: one JSON object a line, `{msg, …fields}`, on the console the Workers
 * runtime collects (Workers Logs / `wrangler tail`). `console` is looked up at each call, so a
 * test that spies on it sees every line.
 */
export const log: Logger = {
  info: (msg, fields) => console.log(line(msg, fields)),
  warn: (msg, fields) => console.warn(line(msg, fields)),
  error: (msg, fields) => console.error(line(msg, fields)),
};

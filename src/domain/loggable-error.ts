/**
 * The one way an error becomes log text, for the gateway (workers/log.ts) and the host
 * (sandbox-host/log.ts) alike. Logs must never carry SQL parameters or user content: drizzle's
 * "Failed query: …\nparams: …" message copies every bound value (a job's output, its claim
 * token, metadata, API-key hashes) and Postgres' data-exception messages quote the offending
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
  let message = withoutParams(e.message);
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

/** A message with drizzle's "params: …" tail (every bound value of the failed query) cut off. */
export function withoutParams(message: string): string {
  return message.replace(/\n?params:[\s\S]*$/, "");
}

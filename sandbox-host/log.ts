/**
 * Structured logs: one JSON object per line on stderr (stdout carries only the `host.ready`
 * line the dev orchestrator parses). Writes go through the stream, never a sync fs call. Error
 * text is redacted like the gateway's (src/domain/loggable-error.ts): a failed terminal write's
 * drizzle message used to put its parameters (the claim token, the tenant's output) in the log.
 */
import { loggableError, withoutParams } from "../src/domain/loggable-error";

export type LogFields = Record<string, unknown>;

export interface Logger {
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

/** An error's log fields: its redacted cause chain, its name and its code (a SQLSTATE, ECONNREFUSED…). */
export function errorFields(err: unknown): LogFields {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return { error: loggableError(err), error_name: err.name, ...(code === undefined ? {} : { error_code: code }) };
  }
  return { error: String(err) };
}

/**
 * Every line's `error` field, however it was made: an error object through the redaction, a
 * string (a message some caller took itself) with any "params: …" tail cut.
 */
function redacted(fields: LogFields | undefined): LogFields | undefined {
  if (fields?.error === undefined) return fields;
  const { error } = fields;
  return { ...fields, error: typeof error === "string" ? withoutParams(error) : loggableError(error) };
}

export function createLogger(base: LogFields, write: (line: string) => void = (l) => process.stderr.write(l)): Logger {
  const log = (level: string, msg: string, fields?: LogFields) =>
    write(`${JSON.stringify({ ts: new Date().toISOString(), level, msg, ...base, ...redacted(fields) })}\n`);
  return {
    info: (msg, fields) => log("info", msg, fields),
    warn: (msg, fields) => log("warn", msg, fields),
    error: (msg, fields) => log("error", msg, fields),
  };
}

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

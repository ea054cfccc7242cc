/**
 * Structured logs: one JSON object per line on stderr (stdout carries only the `host.ready`
 * line the dev orchestrator parses). Writes go through the stream, never a sync fs call.
 */
export type LogFields = Record<string, unknown>;

export interface Logger {
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

export function errorFields(err: unknown): LogFields {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return { error: err.message, error_name: err.name, ...(code === undefined ? {} : { error_code: code }) };
  }
  return { error: String(err) };
}

export function createLogger(base: LogFields, write: (line: string) => void = (l) => process.stderr.write(l)): Logger {
  const log = (level: string, msg: string, fields?: LogFields) =>
    write(`${JSON.stringify({ ts: new Date().toISOString(), level, msg, ...base, ...fields })}\n`);
  return {
    info: (msg, fields) => log("info", msg, fields),
    warn: (msg, fields) => log("warn", msg, fields),
    error: (msg, fields) => log("error", msg, fields),
  };
}

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

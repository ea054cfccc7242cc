/**
 * The gateway's logger. Error text goes through src/domain/loggable-error.ts, the redaction the
 * host's logger shares: no SQL parameters, no value a Postgres error quotes.
 */
import { loggableError } from "../src/domain/loggable-error";

export { loggableError, loggableStack } from "../src/domain/loggable-error";

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

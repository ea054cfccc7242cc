/**
 * Named prepared statements for the statements of every run's lifecycle. They open with their
 * name as a comment (`LIFECYCLE_STATEMENT` in src/db/ownership-repo.ts) and their text never
 * varies, so each connection of the host's pool sends them as named statements: Postgres parses
 * and plans each once per connection instead of on every execution — planning was ~40 % of its
 * time on them, and the whole lifecycle ran ~1.5× faster this way (docs/claims.md). "Once": after
 * five custom plans Postgres keeps the generic plan only if its estimated cost is no higher, so
 * what changes the plan's shape (a LIMIT) belongs in the text, not in a parameter. Every other
 * statement goes out as before (a statement whose text varies must not be named: each text would
 * stay prepared on the connection). Only for a direct connection: a transaction-mode pooler may
 * hand the next transaction to a server connection that never saw the statement.
 */
import type pg from "pg";
import { LIFECYCLE_STATEMENT } from "../src/db/ownership-repo";

type Query = (config: unknown, values?: unknown, callback?: unknown) => unknown;

export function nameLifecycleStatements(pool: pg.Pool): void {
  pool.on("connect", (client) => {
    const query = (client.query as Query).bind(client);
    (client as unknown as { query: Query }).query = (config, values, callback) => {
      if (config !== null && typeof config === "object" && !(config as { name?: string }).name) {
        const text = (config as { text?: unknown }).text;
        const name = typeof text === "string" ? LIFECYCLE_STATEMENT.exec(text.trimStart())?.[1] : undefined;
        if (name) return query({ ...config, name }, values, callback);
      }
      return query(config, values, callback);
    };
  });
}

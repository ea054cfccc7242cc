/**
 * `POST /sql`: Neon's SQL-over-HTTP protocol, as the `neon()` query function of
 * @neondatabase/serverless 1.2.0 speaks it, served from a `pg.Pool` on the local database.
 *
 * Request: `{query, params}` or `{queries: [{query, params}, ...]}` (params already text or
 * null: the client runs pg's prepareValue), headers `Neon-Connection-String`,
 * `Neon-Raw-Text-Output: true`, `Neon-Array-Mode: true`, and for batches
 * `Neon-Batch-Isolation-Level` / `-Read-Only` / `-Deferrable`.
 * Response: `{fields, command, rowCount, rows, rowAsArray}` (values as Postgres' text output,
 * the client applies its own type parsers), `{results: [...]}` for a batch, run in one
 * transaction. A Postgres error is HTTP 400 with its fields (`message`, `code`, `detail`, ...),
 * which the client copies onto the NeonDbError it throws.
 *
 * Like Neon, every query goes through the extended protocol, so two statements in one query
 * fail here as they would in production, and each request is stateless: a connection left
 * inside a transaction is destroyed instead of returned to the pool.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import pg from "pg";
import { connectionStringChecker, describeTarget, type PgTarget } from "./target";

/** Neon's own limit on a request body. */
const MAX_BODY_BYTES = 10 * 1024 * 1024;

const ERROR_FIELDS = [
  "severity",
  "code",
  "detail",
  "hint",
  "position",
  "internalPosition",
  "internalQuery",
  "where",
  "schema",
  "table",
  "column",
  "dataType",
  "constraint",
  "file",
  "line",
  "routine",
] as const;

const ISOLATION: Record<string, string> = {
  ReadUncommitted: "READ UNCOMMITTED",
  ReadCommitted: "READ COMMITTED",
  RepeatableRead: "REPEATABLE READ",
  Serializable: "SERIALIZABLE",
};

/** Every value stays the text Postgres sent; parsing is the client's job. */
const RAW_TEXT = { getTypeParser: () => (value: string) => value } as unknown as pg.CustomTypesConfig;

class RequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

interface SqlQuery {
  query: string;
  params: unknown[];
}

function parseQuery(value: unknown, where: string): SqlQuery {
  const q = value as { query?: unknown; params?: unknown };
  if (typeof q !== "object" || q === null || typeof q.query !== "string") {
    throw new RequestError(400, `${where} must be an object with a string "query"`);
  }
  if (q.params !== undefined && !Array.isArray(q.params)) {
    throw new RequestError(400, `${where}.params must be an array`);
  }
  return { query: q.query, params: (q.params as unknown[] | undefined) ?? [] };
}

function parseBody(text: string): SqlQuery | SqlQuery[] {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (err) {
    throw new RequestError(400, `request body is not valid JSON: ${(err as Error).message}`);
  }
  const batch = (body as { queries?: unknown } | null)?.queries;
  if (batch !== undefined) {
    if (!Array.isArray(batch)) throw new RequestError(400, `"queries" must be an array`);
    return batch.map((q, i) => parseQuery(q, `queries[${i}]`));
  }
  return parseQuery(body, "request body");
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new RequestError(413, `request body exceeds ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString("utf8");
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function beginStatement(req: IncomingMessage): string {
  const parts = ["BEGIN"];
  const isolation = header(req, "neon-batch-isolation-level");
  if (isolation !== undefined) {
    const level = ISOLATION[isolation];
    if (!level) {
      throw new RequestError(
        400,
        `Neon-Batch-Isolation-Level must be one of ${Object.keys(ISOLATION).join(", ")} (got ${isolation})`,
      );
    }
    parts.push(`ISOLATION LEVEL ${level}`);
  }
  const readOnly = header(req, "neon-batch-read-only");
  if (readOnly !== undefined) parts.push(readOnly === "true" ? "READ ONLY" : "READ WRITE");
  const deferrable = header(req, "neon-batch-deferrable");
  if (deferrable !== undefined) parts.push(deferrable === "true" ? "DEFERRABLE" : "NOT DEFERRABLE");
  return parts.join(" ");
}

async function run(client: pg.PoolClient, q: SqlQuery, arrayMode: boolean) {
  const result = await client.query({
    text: q.query,
    values: q.params,
    rowMode: "array",
    types: RAW_TEXT,
    queryMode: "extended",
  } as pg.QueryArrayConfig);
  const fields = result.fields.map((f) => ({
    name: f.name,
    dataTypeID: f.dataTypeID,
    tableID: f.tableID,
    columnID: f.columnID,
    dataTypeSize: f.dataTypeSize,
    dataTypeModifier: f.dataTypeModifier,
    format: f.format,
  }));
  const rows = arrayMode
    ? result.rows
    : result.rows.map((row) => Object.fromEntries(fields.map((f, i) => [f.name, row[i]])));
  return { fields, command: result.command, rowCount: result.rowCount, rows, rowAsArray: arrayMode };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const json = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(json) });
  res.end(json);
}

export function createSqlOverHttp(target: PgTarget, databaseUrl: string) {
  // Neon's endpoint keeps a warm connection pool behind it; so does this stand-in, for 30 s. With
  // 10 s every burst after a short pause paid 20 backend starts first (100 simultaneous inserts:
  // 730 ms cold against 300 ms warm, measured); much longer and `npm run load`'s after-run check
  // (Postgres sessions back to baseline within 60 s) sees idle connections as a leak.
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: 20,
    idleTimeoutMillis: 30_000,
    // pg-pool bounds two waits with this: a new connection's start, and a query's wait for one of
    // the 20 while all are busy. The second is a queue under a burst, as behind Neon's endpoint:
    // at 5 s, 1,000 submits at once on `npm run dev` waited longer and 883 were answered 503
    // `dependency_unavailable`. A Postgres that is down still answers at once (connection refused).
    connectionTimeoutMillis: 60_000,
  });
  // An idle client losing its server (Postgres restarted) must not crash the proxy.
  pool.on("error", () => {});
  const connectionStringMismatch = connectionStringChecker(target);

  async function execute(req: IncomingMessage, body: SqlQuery | SqlQuery[]) {
    const arrayMode = header(req, "neon-array-mode") === "true";
    const begin = Array.isArray(body) ? beginStatement(req) : null;
    const client = await pool.connect();
    let discard = false;
    try {
      if (!Array.isArray(body)) return await run(client, body, arrayMode);
      await client.query(begin as string);
      try {
        const results = [];
        for (const q of body) results.push(await run(client, q, arrayMode));
        await client.query("COMMIT");
        return { results };
      } catch (err) {
        await client.query("ROLLBACK").catch(() => {
          discard = true;
        });
        throw err;
      }
    } catch (err) {
      if (!(err instanceof pg.DatabaseError)) discard = true;
      throw err;
    } finally {
      client.release(discard || client.getTransactionStatus() !== "I");
    }
  }

  return {
    async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
      try {
        if (req.method !== "POST") throw new RequestError(405, "use POST /sql");
        const mismatch = connectionStringMismatch(header(req, "neon-connection-string"));
        if (mismatch) throw new RequestError(400, mismatch.message, mismatch.sqlstate);
        const body = parseBody(await readBody(req));
        send(res, 200, await execute(req, body));
      } catch (err) {
        if (err instanceof RequestError) {
          return send(res, err.status, { message: err.message, ...(err.code ? { code: err.code } : {}) });
        }
        if (err instanceof pg.DatabaseError) {
          const out: Record<string, unknown> = { message: err.message };
          for (const f of ERROR_FIELDS) if (err[f] !== undefined) out[f] = err[f];
          return send(res, 400, out);
        }
        send(res, 502, {
          message: `pg-proxy could not run the query on ${describeTarget(target)}: ${(err as Error).message}`,
        });
      }
    },
    close: () => pool.end(),
  };
}

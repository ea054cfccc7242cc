/**
 * The local stand-in for Neon's front door, so the gateway runs the production Postgres driver
 * (@neondatabase/serverless) against a local Postgres. Neon's driver never speaks TCP: its
 * Pool/Client tunnel the Postgres protocol through a WebSocket, and its `neon()` query function
 * posts each query to an HTTPS `/sql` endpoint. Local Postgres offers neither, so this serves:
 *
 *   GET  /v2?address=host:port   WebSocket → TCP to the configured Postgres (ws-tunnel.ts)
 *   POST /sql                    Neon's SQL-over-HTTP on a pg.Pool (sql-over-http.ts)
 *   GET  /healthz                200
 *
 * Client side (the settings the drivers need): `neonConfig.wsProxy = (h, p) => "<proxy>/v2?address=" + h + ":" + p`,
 * `useSecureWebSocket = false`, `pipelineTLS = false`, `pipelineConnect = false`, in Node also
 * `webSocketConstructor = ws`; for `neon()`, `neonConfig.fetchEndpoint = "<proxy>/sql"`.
 * Measured there: 1.4–2.2 ms per round trip through the proxy from Node (0.14–0.9 ms with
 * `coalesceWrites = false`), 0.3–0.5 ms from inside workerd, against 0.2–0.4 ms direct.
 *
 * It only ever reaches the one database in `databaseUrl` and listens on loopback: it is a dev
 * tool, not an open relay. `/sql` runs queries on the proxy's own pool, so it checks that the
 * request's connection string carries `databaseUrl`'s user and password (28P01 otherwise); the
 * WebSocket tunnel carries the client's own login to Postgres, which checks it.
 *
 *   tsx tools/bridges/pg-proxy/main.ts --database-url postgres://... [--port N] [--host 127.0.0.1] [--workers N]
 *   (or DATABASE_URL, PG_PROXY_PORT, PG_PROXY_WORKERS)
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { parseWorkers, serveWithWorkers } from "../workers";
import { createSqlOverHttp } from "./sql-over-http";
import { parseTarget } from "./target";
import { createWsTunnel } from "./ws-tunnel";

export interface PgProxyOptions {
  databaseUrl: string;
  host?: string;
  /** 0 or unset: a free port chosen by the kernel. */
  port?: number;
}

export interface PgProxy {
  /** e.g. "http://127.0.0.1:5480": `/sql` and `/v2` hang off it. */
  url: string;
  port: number;
  close(): Promise<void>;
}

export async function startPgProxy(opts: PgProxyOptions): Promise<PgProxy> {
  const target = parseTarget(opts.databaseUrl);
  const tunnel = createWsTunnel(target);
  const sql = createSqlOverHttp(target, opts.databaseUrl);

  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (path === "/sql") {
      void sql.handle(req, res);
    } else if (path === "/healthz" && req.method === "GET") {
      res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
    } else {
      res
        .writeHead(404, { "content-type": "text/plain" })
        .end("pg-proxy serves POST /sql, GET /v2 (WebSocket), GET /healthz\n");
    }
  });
  // Node closes idle keep-alive sockets after 5 s by default; a client (workerd's fetch, undici)
  // reusing one at that instant sees "Network connection lost". Outlive any client's idle reuse.
  server.keepAliveTimeout = 75_000;
  server.headersTimeout = 76_000;
  server.on("upgrade", (req, socket, head) => tunnel.handleUpgrade(req, socket, head));
  // A client dropping mid-handshake must not take the proxy down.
  server.on("clientError", (_err, socket) => socket.destroy());

  const host = opts.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const urlHost = host.includes(":") ? `[${host}]` : host;

  let closing: Promise<void> | null = null;
  return {
    url: `http://${urlHost}:${port}`,
    port,
    close() {
      closing ??= (async () => {
        tunnel.close();
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await stopped;
        await sql.close();
      })();
      return closing;
    },
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      "database-url": { type: "string" },
      port: { type: "string" },
      host: { type: "string" },
      workers: { type: "string" },
    },
  });
  const databaseUrl = values["database-url"] ?? process.env.DATABASE_URL;
  if (!databaseUrl) {
    console.error(
      "usage: tsx tools/bridges/pg-proxy/main.ts --database-url postgres://user:pass@127.0.0.1:5432/db [--port N] [--workers N]",
    );
    process.exit(2);
  }
  const portText = values.port ?? process.env.PG_PROXY_PORT;
  const port = portText === undefined ? 0 : Number(portText);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`--port / PG_PROXY_PORT must be a port number (got ${portText})`);
    process.exit(2);
  }
  const workers = parseWorkers(values.workers ?? process.env.PG_PROXY_WORKERS, "--workers / PG_PROXY_WORKERS");
  await serveWithWorkers(
    "pg-proxy",
    workers,
    () => startPgProxy({ databaseUrl, port, host: values.host }),
    (url) => [
      `pg-proxy listening on ${url} (POST /sql, WebSocket /v2) → ${new URL(databaseUrl).host}` +
        (workers > 1 ? ` (${workers} worker processes)` : ""),
    ],
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(`pg-proxy failed to start: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  });
}

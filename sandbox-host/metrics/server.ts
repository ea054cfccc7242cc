/**
 * The host's own HTTP port, on loopback unless HOST_METRICS_HOST says otherwise (a pod sets
 * 0.0.0.0): `/metrics` (Prometheus text), `/healthz` (the process answers) and `/readyz` (it can
 * do its work now: 503 with the reasons when not, e.g. the quota's circuit breaker is open, so no
 * model call can be admitted, or the host is shutting down).
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { BreakerSnapshot } from "../../src/quota/breaker";
import type { HostMetrics } from "./metrics";

export interface Readiness {
  ready: boolean;
  /** Why not, one sentence each; empty when ready. */
  reasons: string[];
  /** The quota circuit breaker; null when the host runs without a quota. */
  quota: BreakerSnapshot | null;
}

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

export async function startMetricsServer(opts: {
  port: number;
  hostId: string;
  metrics: HostMetrics;
  runsActive: () => number;
  /** Default: always ready. */
  readiness?: () => Readiness;
  host?: string;
}): Promise<MetricsServer> {
  const { metrics } = opts;
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method !== "GET") {
      res.writeHead(405, { allow: "GET" }).end();
      return;
    }
    if (path === "/metrics") {
      metrics.registry.metrics().then(
        (text) => res.writeHead(200, { "content-type": metrics.registry.contentType }).end(text),
        (err: unknown) => res.writeHead(500, { "content-type": "text/plain" }).end(String(err)),
      );
      return;
    }
    if (path === "/healthz") {
      const body = JSON.stringify({ ok: true, id: opts.hostId, runs_active: opts.runsActive() });
      res.writeHead(200, { "content-type": "application/json" }).end(body);
      return;
    }
    if (path === "/readyz") {
      const r = opts.readiness?.() ?? { ready: true, reasons: [], quota: null };
      const q = r.quota;
      const body = JSON.stringify({
        ready: r.ready,
        id: opts.hostId,
        reasons: r.reasons,
        quota: q && {
          breaker: q.state,
          consecutive_failures: q.consecutiveFailures,
          retry_in_ms: q.retryInMs,
          opened: q.opened,
          last_error: q.lastError,
        },
      });
      res.writeHead(r.ready ? 200 : 503, { "content-type": "application/json" }).end(body);
      return;
    }
    res
      .writeHead(404, { "content-type": "application/json" })
      .end('{"error":{"code":"not_found","message":"no such route"}}');
  });
  const bindHost = opts.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, bindHost, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${bindHost}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

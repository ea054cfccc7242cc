/**
 * An HTTP proxy in front of the gateway that counts the requests it forwards, by route (method
 * and path with ids as `{id}`), and for the hosts' ingest (`POST /internal/events`) the jobs and
 * events each request carried: every job of an ingest request is one call into that job's
 * Durable Object. Responses stream through untouched (an SSE stream stays a stream). Benches put
 * it between the gateway and its clients and hosts to count what a run costs in requests.
 */
import { createServer, type IncomingMessage, request, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface RequestCounts {
  /** Requests by `METHOD /path/{id}/...`. */
  byRoute: Map<string, number>;
  requests: number;
  /** Jobs named across the ingest requests (one Durable Object call each), and their events. */
  ingestJobs: number;
  ingestEvents: number;
}

const ID = /\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?=\/|$)/g;

export function routeOf(method: string, url: string): string {
  const path = url.split("?")[0] ?? url;
  return `${method} ${path.replace(ID, "/{id}")}`;
}

/** Jobs and events an ingest body names: `{job_id, events}` or `{batches: [{job_id, events}]}`. */
export function ingestShape(body: string): { jobs: number; events: number } {
  try {
    const doc = JSON.parse(body) as { batches?: Array<{ events?: unknown[] }>; events?: unknown[] };
    const batches = Array.isArray(doc.batches) ? doc.batches : [doc];
    return {
      jobs: batches.length,
      events: batches.reduce((n, b) => n + (Array.isArray(b.events) ? b.events.length : 0), 0),
    };
  } catch {
    return { jobs: 0, events: 0 };
  }
}

export async function countingHttpProxy(upstream: string) {
  const target = new URL(upstream);
  const counts: RequestCounts = { byRoute: new Map(), requests: 0, ingestJobs: 0, ingestEvents: 0 };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const route = routeOf(req.method ?? "GET", req.url ?? "/");
    counts.requests++;
    counts.byRoute.set(route, (counts.byRoute.get(route) ?? 0) + 1);
    const ingest = route === "POST /internal/events";
    const chunks: Buffer[] = [];
    const out = request(
      {
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: target.host },
      },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    out.on("error", () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    res.on("close", () => out.destroy());
    req.on("data", (c: Buffer) => {
      if (ingest) chunks.push(c);
      out.write(c);
    });
    req.on("end", () => {
      out.end();
      if (ingest) {
        const shape = ingestShape(Buffer.concat(chunks).toString("utf8"));
        counts.ingestJobs += shape.jobs;
        counts.ingestEvents += shape.events;
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    counts,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

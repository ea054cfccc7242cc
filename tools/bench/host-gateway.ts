/**
 * The gateway's CPU per request, by route, for `npm run bench:host`: the whole local stack
 * (tools/stack/start.ts, the gateway in workerd under Miniflare) and the workerd process's own CPU
 * (utime + stime of every thread, /proc) over K requests of one route sent one at a time, divided
 * by K. This is the whole process: the runtime's HTTP handling, the Worker, the Durable Objects
 * the route touches and the Neon driver's requests; Cloudflare bills a Worker's CPU without the
 * runtime's own plumbing, so these figures are an upper bound of what the free plan's 10 ms
 * limit counts. Ingest batches are what a real host sends while it runs jobs (counted on the
 * wire by a proxy between the host and the gateway), with no SSE client attached.
 */
import { readdir, readFile, readlink } from "node:fs/promises";
import { createServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import pg from "pg";
import { type Stack, startStack } from "../stack/start";
import { pct } from "./harness";

export interface RouteCost {
  route: string;
  requests: number;
  /** CPU ms per request, per round of K: median and p95 over the rounds. */
  cpuMs: { p50: number; p95: number };
  /** Wall time per request (ms) over all requests: median and p95. */
  wallMs: { p50: number; p95: number };
}

async function cpuMs(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** The workerd process under the gateway runner: the first descendant named workerd. */
async function findWorkerd(rootPid: number): Promise<number> {
  const children = new Map<number, number[]>();
  const names = new Map<number, string>();
  for (const d of await readdir("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = await readFile(`/proc/${d}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      names.set(Number(d), name);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(d)]);
    } catch {}
  }
  const queue = [rootPid];
  while (queue.length > 0) {
    const pid = queue.shift() as number;
    if (names.get(pid) === "workerd") return pid;
    queue.push(...(children.get(pid) ?? []));
  }
  throw new Error(`no workerd process under pid ${rootPid}`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Open an SSE stream, wait for the response head, and close it. The head is the whole connect:
 * a queued job has no event to send yet, and a stream's first bytes may be a heartbeat 15 s on.
 */
function sseConnect(url: string, apiKey: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      { headers: { authorization: `Bearer ${apiKey}`, accept: "text/event-stream" } },
      (res) => {
        req.destroy();
        if (res.statusCode === 200) resolve();
        else reject(new Error(`SSE answered ${res.statusCode}`));
      },
    );
    req.on("error", (err) => {
      if (!req.destroyed) reject(err);
    });
    req.end();
  });
}

export async function measureGateway(log: (line: string) => void): Promise<RouteCost[]> {
  const stack: Stack = await startStack({ hosts: 0, mockModel: { ttftMs: 50, tokensPerS: 200 } });
  const results: RouteCost[] = [];
  try {
    // The process holding the gateway's port (workerd itself under Miniflare), or workerd below it.
    const workerd = await findWorkerd(await listenerPid(stack.gatewayUrl));
    log(`gateway: workerd pid ${workerd}`);
    const headers = { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" };
    const ROUNDS = 5;
    const K = 20;

    async function route(name: string, once: (i: number) => Promise<void>): Promise<void> {
      for (let i = 0; i < 3; i++) await once(-1 - i); // warm-up
      const perRound: number[] = [];
      const walls: number[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        await sleep(200);
        const c0 = await cpuMs(workerd);
        for (let i = 0; i < K; i++) {
          const t = performance.now();
          await once(r * K + i);
          walls.push(performance.now() - t);
        }
        // The process's counters move in 10 ms ticks: let the last request's tail land.
        await sleep(100);
        perRound.push(((await cpuMs(workerd)) - c0) / K);
      }
      const cost = {
        route: name,
        requests: ROUNDS * K,
        cpuMs: { p50: pct(perRound, 50), p95: pct(perRound, 95) },
        wallMs: { p50: pct(walls, 50), p95: pct(walls, 95) },
      };
      results.push(cost);
      log(`gateway ${name}: ${JSON.stringify(cost)}`);
    }

    const jobIds: string[] = [];
    const body = JSON.stringify({ input: { messages: [{ role: "user", content: '!mock {"reply": "hello there"}' }] } });
    await route("POST /v1/jobs (submit)", async () => {
      const res = await fetch(`${stack.gatewayUrl}/v1/jobs`, { method: "POST", headers, body });
      if (res.status !== 202) throw new Error(`submit answered ${res.status}: ${await res.text()}`);
      jobIds.push(((await res.json()) as { job: { id: string } }).job.id);
    });
    await route("GET /v1/jobs/{id}", async (i) => {
      const id = jobIds[Math.abs(i) % jobIds.length];
      const res = await fetch(`${stack.gatewayUrl}/v1/jobs/${id}`, { headers });
      if (res.status !== 200) throw new Error(`get answered ${res.status}`);
      await res.arrayBuffer();
    });
    await route("GET /v1/jobs/{id}/events (SSE connect)", async (i) =>
      sseConnect(`${stack.gatewayUrl}/v1/jobs/${jobIds[Math.abs(i) % jobIds.length]}/events`, stack.apiKey),
    );

    // Ingest: a real host runs the queued jobs; a proxy in front of the gateway counts its requests.
    const ingest = { requests: 0, batches: 0, events: 0 };
    const target = new URL(stack.gatewayUrl);
    const proxy = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const body = Buffer.concat(chunks);
      if (req.url?.startsWith("/internal/events")) {
        // A request carries one batch per job it has events for (the outbox's per-host flush).
        const { batches } = JSON.parse(body.toString("utf8")) as { batches: Array<{ events: unknown[] }> };
        ingest.requests++;
        ingest.batches += batches.length;
        ingest.events += batches.reduce((a, b) => a + b.events.length, 0);
      }
      const up = httpRequest(
        { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
        (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        },
      );
      up.on("error", () => res.destroy());
      up.end(body);
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    const c0 = await cpuMs(workerd);
    const host = await stack.addHost({
      GATEWAY_URL: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
      HOST_MAX_RUNS: "10",
    });
    const t0 = performance.now();
    // Done when every submitted job is finished: read straight from Postgres, not through the gateway.
    const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 1 });
    try {
      for (;;) {
        const { rows } = await pool.query<{ n: string }>(
          "SELECT count(*) AS n FROM jobs WHERE id = ANY($1) AND state NOT IN ('completed','failed','cancelled')",
          [jobIds],
        );
        if (Number(rows[0]?.n) === 0 || performance.now() - t0 > 300_000) break;
        await sleep(250);
      }
      await sleep(1000); // the last events' delivery after the terminal write
    } finally {
      await pool.end();
    }
    const cpu = (await cpuMs(workerd)) - c0;
    await host.stop();
    proxy.close();
    // One figure (the whole phase's CPU over its requests), so no p95; also per job batch and event.
    const per = (n: number) => ({ p50: cpu / Math.max(1, n), p95: Number.NaN });
    const none = { p50: Number.NaN, p95: Number.NaN };
    results.push(
      {
        route: "POST /internal/events, per request (a host running the jobs)",
        requests: ingest.requests,
        cpuMs: per(ingest.requests),
        wallMs: none,
      },
      {
        route: "  the same, per job batch in a request",
        requests: ingest.batches,
        cpuMs: per(ingest.batches),
        wallMs: none,
      },
      { route: "  the same, per event", requests: ingest.events, cpuMs: per(ingest.events), wallMs: none },
    );
    log(`gateway ingest: ${JSON.stringify({ ...ingest, jobs: jobIds.length, workerdCpuMs: cpu })}`);
  } finally {
    await stack.stop();
  }
  return results;
}

/** The pid of the process listening on the gateway's port. */
async function listenerPid(gatewayUrl: string): Promise<number> {
  const port = Number(new URL(gatewayUrl).port);
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  const tcp = await readFile("/proc/net/tcp", "utf8");
  const line = tcp.split("\n").find((l) => l.includes(`:${hex} `) && l.trim().split(/\s+/)[3] === "0A");
  const inode = line?.trim().split(/\s+/)[9];
  if (!inode) throw new Error(`nothing listens on port ${port}`);
  for (const d of await readdir("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      for (const fd of await readdir(`/proc/${d}/fd`)) {
        if ((await readlink(`/proc/${d}/fd/${fd}`).catch(() => "")) === `socket:[${inode}]`) return Number(d);
      }
    } catch {}
  }
  throw new Error(`no process owns the socket on port ${port}`);
}

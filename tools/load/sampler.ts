/**
 * Resource probes, sampled about every 250 ms during a step: Redis connected clients (INFO over one
 * ioredis connection, resp.ts), Postgres sessions (pg_stat_activity), sandbox containers and networks
 * (Docker, label `ear.sandbox`; tolerated when Docker is absent), and each host's /metrics
 * (RSS, runs_active, sandboxes_active, event-loop lag histogram). Every probe is optional: a
 * missing one is reported as null, never as zero.
 */
import { cpus, loadavg } from "node:os";
import { monitorEventLoopDelay } from "node:perf_hooks";
import Docker from "dockerode";
import pg from "pg";
import { type Buckets, bucketDelta, gauge, histogramBuckets, parsePrometheus, summarizeBuckets } from "./prom";
import { RespInfo } from "./resp";
import type { HostPeak, HostRef, Peaks } from "./types";

export interface HostSample {
  id: string;
  ok: boolean;
  rssBytes: number | null;
  runsActive: number | null;
  sandboxesActive: number | null;
  outboxBacklog: number | null;
  lag: Buckets | null;
}

export interface Snapshot {
  t: number;
  redisClients: number | null;
  redisPubsub: number | null;
  /** Of `redisClients`, the sleeping hosts' wake-polls (BLPOP, each on a connection of its own). */
  redisWakePolls: number | null;
  pgTotal: number | null;
  pgActive: number | null;
  containers: number | null;
  networks: number | null;
  hosts: HostSample[];
  /** 1-minute load average of this machine (the client, gateway and hosts share it locally). */
  loadavg1: number;
}

const maxOf = (xs: Array<number | null>): number | null => {
  const v = xs.filter((x): x is number => x !== null);
  return v.length ? Math.max(...v) : null;
};
const minOf = (xs: Array<number | null>): number | null => {
  const v = xs.filter((x): x is number => x !== null);
  return v.length ? Math.min(...v) : null;
};
const sumOf = (xs: Array<number | null>): number | null => {
  const v = xs.filter((x): x is number => x !== null);
  return v.length ? v.reduce((a, b) => a + b, 0) : null;
};

export class Sampler {
  private redis: RespInfo | null;
  private pgClient: pg.Client | null = null;
  private pgTried = false;
  private docker: Docker | null = new Docker();
  private dockerOk = true;
  readonly notes = new Set<string>();

  constructor(
    private readonly opts: {
      redisUrl: string | null;
      databaseUrl: string | null;
      hosts: () => HostRef[];
      intervalMs?: number;
    },
  ) {
    this.redis = opts.redisUrl ? new RespInfo(opts.redisUrl) : null;
    if (!opts.redisUrl) this.notes.add("no redis_url (Upstash endpoint?): Redis clients not sampled");
    if (!opts.databaseUrl) this.notes.add("no database_url: Postgres sessions not sampled");
  }

  private async pgCounts(): Promise<{ total: number; active: number } | null> {
    if (!this.opts.databaseUrl) return null;
    try {
      if (!this.pgClient && !this.pgTried) {
        this.pgTried = true;
        const c = new pg.Client({ connectionString: this.opts.databaseUrl, application_name: "ear-load-sampler" });
        c.on("error", () => {
          this.pgClient = null;
        });
        await c.connect();
        this.pgClient = c;
      }
      if (!this.pgClient) return null;
      const r = await this.pgClient.query<{ total: number; active: number }>(
        `select count(*)::int as total, (count(*) filter (where state = 'active'))::int as active
           from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()`,
      );
      return r.rows[0] ?? null;
    } catch (err) {
      this.notes.add(`Postgres probe failed: ${(err as Error).message}`);
      this.pgClient = null;
      this.pgTried = false;
      return null;
    }
  }

  private async redisCounts(): Promise<{ clients: number | null; pubsub: number | null; wakePolls: number | null }> {
    if (!this.redis) return { clients: null, pubsub: null, wakePolls: null };
    try {
      const info = await this.redis.clients();
      return {
        clients: info.connected_clients ?? null,
        pubsub: info.pubsub_clients ?? null,
        wakePolls: info.wake_poll_clients ?? null,
      };
    } catch (err) {
      this.notes.add(`Redis probe failed: ${(err as Error).message}`);
      return { clients: null, pubsub: null, wakePolls: null };
    }
  }

  private async dockerCounts(): Promise<{ containers: number | null; networks: number | null }> {
    if (!this.docker || !this.dockerOk) return { containers: null, networks: null };
    try {
      const filters = { label: ["ear.sandbox"] };
      const [cs, ns] = await Promise.all([
        this.docker.listContainers({ all: true, filters }),
        this.docker.listNetworks({ filters }),
      ]);
      return { containers: cs.length, networks: ns.length };
    } catch (err) {
      this.dockerOk = false;
      this.notes.add(`Docker not reachable (${(err as Error).message}); containers/networks not sampled`);
      return { containers: null, networks: null };
    }
  }

  private async hostSample(h: HostRef): Promise<HostSample> {
    try {
      const res = await fetch(h.metricsUrl, { signal: AbortSignal.timeout(2000) });
      const samples = parsePrometheus(await res.text());
      return {
        id: h.id,
        ok: res.ok,
        rssBytes: gauge(samples, "process_resident_memory_bytes"),
        runsActive: gauge(samples, "runs_active", true),
        sandboxesActive: gauge(samples, "sandboxes_active", true),
        outboxBacklog: gauge(samples, "outbox_backlog", true),
        lag: histogramBuckets(samples, "event_loop_lag_seconds"),
      };
    } catch {
      return {
        id: h.id,
        ok: false,
        rssBytes: null,
        runsActive: null,
        sandboxesActive: null,
        outboxBacklog: null,
        lag: null,
      };
    }
  }

  async snapshot(): Promise<Snapshot> {
    const [pgc, rc, dc, hosts] = await Promise.all([
      this.pgCounts(),
      this.redisCounts(),
      this.dockerCounts(),
      Promise.all(this.opts.hosts().map((h) => this.hostSample(h))),
    ]);
    return {
      t: Date.now(),
      redisClients: rc.clients,
      redisPubsub: rc.pubsub,
      redisWakePolls: rc.wakePolls,
      pgTotal: pgc?.total ?? null,
      pgActive: pgc?.active ?? null,
      containers: dc.containers,
      networks: dc.networks,
      hosts,
      loadavg1: loadavg()[0] as number,
    };
  }

  /** Samples until the returned stop() is called; stop() resolves the window's peaks. */
  startWindow(): { stop: () => Promise<Peaks> } {
    const interval = this.opts.intervalMs ?? 250;
    const snaps: Snapshot[] = [];
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    let running = true;
    let timer: NodeJS.Timeout | undefined;
    const started = Date.now();
    let current: Promise<void> = Promise.resolve();
    const tick = () => {
      current = this.snapshot().then((s) => {
        snaps.push(s);
        if (running) timer = setTimeout(tick, Math.max(0, interval - (Date.now() - s.t)));
      });
    };
    tick();
    return {
      stop: async () => {
        running = false;
        clearTimeout(timer);
        await current;
        snaps.push(await this.snapshot());
        loop.disable();
        return this.peaks(snaps, started, loop);
      },
    };
  }

  private peaks(snaps: Snapshot[], started: number, loop: ReturnType<typeof monitorEventLoopDelay>): Peaks {
    const ids = [...new Set(snaps.flatMap((s) => s.hosts.map((h) => h.id)))];
    const hosts: HostPeak[] = ids.map((id) => {
      const series = snaps.map((s) => s.hosts.find((h) => h.id === id)).filter((h): h is HostSample => !!h?.ok);
      const firstLag = series[0]?.lag ?? null;
      const lastLag = series[series.length - 1]?.lag ?? null;
      const lag = summarizeBuckets(bucketDelta(firstLag, lastLag));
      return {
        id,
        rssPeakBytes: maxOf(series.map((h) => h.rssBytes)),
        runsActivePeak: maxOf(series.map((h) => h.runsActive)),
        lagSamples: lag.samples,
        lagP99UpperMs: lag.p99UpperS === null ? null : lag.p99UpperS * 1000,
        lagMaxBucketMs: lag.maxBucketS === null ? null : lag.maxBucketS * 1000,
        lagMaxAtLeastMs: lag.maxAtLeastS === null ? null : lag.maxAtLeastS * 1000,
        outboxBacklogPeak: maxOf(series.map((h) => h.outboxBacklog)),
      };
    });
    return {
      samples: snaps.length,
      redisClientsPeak: maxOf(snaps.map((s) => s.redisClients)),
      redisClientsMin: minOf(snaps.map((s) => s.redisClients)),
      redisPubsubPeak: maxOf(snaps.map((s) => s.redisPubsub)),
      pgTotalPeak: maxOf(snaps.map((s) => s.pgTotal)),
      pgActivePeak: maxOf(snaps.map((s) => s.pgActive)),
      containersPeak: maxOf(snaps.map((s) => s.containers)),
      networksPeak: maxOf(snaps.map((s) => s.networks)),
      rssPeakBytes: maxOf(hosts.map((h) => h.rssPeakBytes)),
      runsActivePeak: maxOf(snaps.map((s) => sumOf(s.hosts.map((h) => h.runsActive)))),
      lagP99UpperMs: maxOf(hosts.map((h) => h.lagP99UpperMs)),
      lagMaxBucketMs: maxOf(hosts.map((h) => h.lagMaxBucketMs)),
      lagMaxAtLeastMs: maxOf(hosts.map((h) => h.lagMaxAtLeastMs)),
      outboxBacklogPeak: maxOf(snaps.map((s) => sumOf(s.hosts.map((h) => h.outboxBacklog)))),
      hosts,
      clientLoopP99Ms: loop.count ? loop.percentile(99) / 1e6 : null,
      clientLoopMaxMs: loop.count ? loop.max / 1e6 : null,
      loadavg1Peak: Math.max(...snaps.map((s) => s.loadavg1)),
      cores: cpus().length,
      timeline: snaps.map((s) => [
        s.t - started,
        sumOf(s.hosts.map((h) => h.runsActive)),
        s.redisClients,
        s.pgTotal,
        s.containers,
      ]),
    };
  }

  async close(): Promise<void> {
    this.redis?.close();
    await this.pgClient?.end().catch(() => {});
    this.pgClient = null;
  }
}

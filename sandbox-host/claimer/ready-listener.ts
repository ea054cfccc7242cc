/**
 * LISTEN ear_ready on a dedicated Postgres connection (drizzle/0001_ready_notify.sql announces
 * every job that becomes claimable). Each notification names a job the claimer tries at once.
 * The same connection LISTENs ear_cancel (drizzle/0004_cancel_notify.sql: a cancel requested for
 * a job with an owner, the owner's host id as payload), so the owner checks its runs' cancel flags
 * at once, and ear_webhook / ear_schedule (drizzle/0016: a webhook delivery is due, a schedule
 * was created or changed) for the webhook sender and the schedule ticker. Only wake-ups: a lost notification costs latency, never a job or a cancel (the index,
 * the sweep, the hint poll and the durable check still find them). Reconnects with backoff when
 * the connection drops.
 */
import pg from "pg";
import { backoffDelay } from "../../src/domain/backoff";
import type { Service } from "../lifecycle/service";
import { errorFields, type Logger } from "../log";

export const READY_CHANNEL = "ear_ready";
export const CANCEL_CHANNEL = "ear_cancel";
/** drizzle/0016: a webhook delivery was queued or made due again (no payload). */
export const WEBHOOK_CHANNEL = "ear_webhook";
/** drizzle/0016: a schedule was created, or its cron, timezone or enabled changed (no payload). */
export const SCHEDULE_CHANNEL = "ear_schedule";

export class ReadyListener implements Service {
  readonly name = "ready listener";
  private client: pg.Client | null = null;
  private stopped = false;
  /**
   * A sleeping host (lifecycle/sleep.ts): the connection is kept while it lasts (a NOTIFY still
   * wakes the host), but once it ends (a suspended compute closes it) nothing reconnects until
   * resume(), and the end is not news.
   */
  private paused = false;
  private attempt = 0;
  private retryTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly opts: {
      databaseUrl: string;
      log: Logger;
      onReady: (jobId: string) => void;
      /** A cancel was requested for a job owned by the host named in the payload. */
      onCancel?: (ownerHostId: string) => void;
      /** A webhook delivery is due (the sender claims at once). */
      onWebhook?: () => void;
      /** A schedule was created or changed (the ticker reads its first tick at once). */
      onSchedule?: () => void;
      /** LISTEN is in place (after a start or a reconnect). */
      onConnected?: () => void;
      /** The connection dropped; a reconnect is scheduled. */
      onDisconnected?: () => void;
    },
  ) {}

  get connected(): boolean {
    return this.client !== null;
  }

  async start(): Promise<void> {
    await this.connect();
  }

  /**
   * A host going to sleep (lifecycle/sleep.ts): the session is kept, idle (it runs no query, so
   * it does not keep a Neon compute up, and its NOTIFYs still wake the host), but when it ends
   * (a suspended compute closes its connections) nothing reconnects until resume(), and the end
   * is not news: the Redis wake-up stands in for it.
   */
  pause(): void {
    this.paused = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  /** Awake again: reconnect now if the session ended while asleep (onConnected then, as any reconnect). */
  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.attempt = 0;
    if (!this.client && !this.retryTimer) void this.connect();
  }

  private async connect(): Promise<void> {
    if (this.stopped || this.paused) return;
    const client = new pg.Client({
      connectionString: this.opts.databaseUrl,
      connectionTimeoutMillis: 5000,
      keepAlive: true,
      keepAliveInitialDelayMillis: 30_000,
    });
    client.on("notification", (msg) => {
      if (msg.channel === READY_CHANNEL && msg.payload) this.opts.onReady(msg.payload);
      else if (msg.channel === CANCEL_CHANNEL && msg.payload) this.opts.onCancel?.(msg.payload);
      else if (msg.channel === WEBHOOK_CHANNEL) this.opts.onWebhook?.();
      else if (msg.channel === SCHEDULE_CHANNEL) this.opts.onSchedule?.();
    });
    client.on("error", (err) => {
      if (this.paused) this.opts.log.info("ready listener session ended while asleep; not reconnecting until awake");
      else this.opts.log.warn("ready listener connection failed", errorFields(err));
      this.dropAndRetry(client);
    });
    client.on("end", () => this.dropAndRetry(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${READY_CHANNEL}`);
      if (this.opts.onCancel) await client.query(`LISTEN ${CANCEL_CHANNEL}`);
      if (this.opts.onWebhook) await client.query(`LISTEN ${WEBHOOK_CHANNEL}`);
      if (this.opts.onSchedule) await client.query(`LISTEN ${SCHEDULE_CHANNEL}`);
      if (this.stopped || this.paused) {
        await client.end().catch(() => {});
        return;
      }
      this.client = client;
      this.attempt = 0;
      this.opts.onConnected?.();
    } catch (err) {
      this.opts.log.warn("ready listener could not connect; retrying", errorFields(err));
      this.dropAndRetry(client);
    }
  }

  private dropAndRetry(client: pg.Client): void {
    if (this.client === client) {
      this.client = null;
      if (!this.paused) this.opts.onDisconnected?.();
    }
    client.end().catch(() => {});
    if (this.stopped || this.paused || this.retryTimer) return;
    const delay = backoffDelay(this.attempt++, { baseMs: 200, maxMs: 5000 }) + 100;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.connect();
    }, delay);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const c = this.client;
    this.client = null;
    await c?.end().catch(() => {});
  }
}

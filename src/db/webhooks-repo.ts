/**
 * Webhook endpoints and their deliveries (src/contracts/webhook.ts). The outbox rows are inserted
 * by the trigger jobs_webhook_outbox (drizzle/0016) in the statement that changes a job's state;
 * this file reads them for the API and is the hosts' sender's claim and result statements.
 *
 * A delivery is sent at least once, always under its own id (`webhook-id`). A sender claims a
 * due delivery by pushing `next_attempt_at` past the attempt's timeout (a lease) and counting the
 * attempt; its result is written only if the row is still at that attempt, so a sender that lost
 * its lease (its host stalled or died, and another host re-sent) writes nothing over the newer one.
 */
import { type SQL, sql } from "drizzle-orm";
import { type DeliveryView, WEBHOOK_LIMITS, type WebhookEventType, type WebhookView } from "../contracts/webhook";
import { isUuid } from "../domain/uuid";
import { type Db, resultCount, resultRows } from "./client";

const iso = (column: SQL) => sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

interface RawWebhook {
  id: string;
  url: string;
  events: WebhookEventType[] | string;
  enabled: boolean;
  created_at: string;
  consecutive_failures: number;
  paused_until: string | null;
  pause_reason: string | null;
  dropped_deliveries: string | number;
}

const json = <T>(v: T | string): T => (typeof v === "string" ? (JSON.parse(v) as T) : v);

// A pause that has ended shows no paused_until; its reason stays while the endpoint is still
// failing (it is then probed one attempt at a time per host), and goes with the first success.
const WEBHOOK_COLUMNS = sql`id, url, events, enabled, ${iso(sql`created_at`)} AS created_at, consecutive_failures,
  CASE WHEN paused_until > now() THEN ${iso(sql`paused_until`)} END AS paused_until, pause_reason, dropped_deliveries`;

function toWebhook(r: RawWebhook): WebhookView {
  return {
    id: r.id,
    url: r.url,
    events: json(r.events),
    enabled: r.enabled,
    created_at: r.created_at,
    consecutive_failures: Number(r.consecutive_failures),
    paused_until: r.paused_until,
    pause_reason: r.pause_reason,
    dropped_deliveries: Number(r.dropped_deliveries),
  };
}

/** A new endpoint, or null when the tenant already has `maxPerTenant`. */
export async function createWebhook(
  db: Db,
  tenantId: string,
  w: { url: string; events: WebhookEventType[]; enabled: boolean; secret: string },
  maxPerTenant: number,
): Promise<WebhookView | null> {
  const rows = resultRows<RawWebhook>(
    await db.execute(sql`
      INSERT INTO webhooks (id, tenant_id, url, events, secret, enabled)
      SELECT ${crypto.randomUUID()}::uuid, ${tenantId}, ${w.url}, ${JSON.stringify(w.events)}::jsonb, ${w.secret},
        ${w.enabled}
      WHERE (SELECT count(*) FROM webhooks WHERE tenant_id = ${tenantId}) < ${maxPerTenant}::int
      RETURNING ${WEBHOOK_COLUMNS}`),
  );
  return rows[0] ? toWebhook(rows[0]) : null;
}

export async function listWebhooks(db: Db, tenantId: string): Promise<WebhookView[]> {
  const rows = resultRows<RawWebhook>(
    await db.execute(
      sql`SELECT ${WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = ${tenantId} ORDER BY created_at, id`,
    ),
  );
  return rows.map(toWebhook);
}

export async function getWebhook(db: Db, tenantId: string, id: string): Promise<WebhookView | null> {
  if (!isUuid(id)) return null;
  const rows = resultRows<RawWebhook>(
    await db.execute(sql`SELECT ${WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = ${tenantId} AND id = ${id}::uuid`),
  );
  return rows[0] ? toWebhook(rows[0]) : null;
}

/** Deletes the endpoint and its deliveries (cascade): nothing more is sent to it. */
export async function deleteWebhook(db: Db, tenantId: string, id: string): Promise<boolean> {
  if (!isUuid(id)) return false;
  return (
    resultCount(await db.execute(sql`DELETE FROM webhooks WHERE tenant_id = ${tenantId} AND id = ${id}::uuid`)) > 0
  );
}

interface RawDelivery {
  id: string;
  webhook_id: string;
  job_id: string;
  event_type: WebhookEventType;
  state: DeliveryView["state"];
  next_attempt_at: string | null;
  created_at: string;
  finished_at: string | null;
  attempts: DeliveryView["attempts"] | string;
}

const DELIVERY_COLUMNS = sql`d.id, d.webhook_id, d.job_id, d.event_type, d.state,
  CASE WHEN d.state = 'pending' THEN ${iso(sql`d.next_attempt_at`)} END AS next_attempt_at,
  ${iso(sql`d.created_at`)} AS created_at, ${iso(sql`d.finished_at`)} AS finished_at,
  coalesce((SELECT json_agg(json_build_object('attempted_at', ${iso(sql`a.attempted_at`)},
      'status_code', a.status_code, 'error', a.error, 'duration_ms', a.duration_ms) ORDER BY a.attempted_at, a.id)
    FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]'::json) AS attempts`;

function toDelivery(r: RawDelivery): DeliveryView {
  return {
    id: r.id,
    webhook_id: r.webhook_id,
    job_id: r.job_id,
    event_type: r.event_type,
    state: r.state,
    next_attempt_at: r.next_attempt_at,
    created_at: r.created_at,
    finished_at: r.finished_at,
    attempts: json(r.attempts),
  };
}

/** The endpoint's deliveries, newest first, each with its attempts; null when the tenant has no such endpoint. */
export async function listDeliveries(
  db: Db,
  tenantId: string,
  webhookId: string,
  limit: number,
): Promise<DeliveryView[] | null> {
  if (!isUuid(webhookId)) return null;
  const rows = resultRows<RawDelivery & { found: boolean }>(
    await db.execute(sql`
      SELECT w.id IS NOT NULL AS found, d.* FROM (SELECT id FROM webhooks WHERE tenant_id = ${tenantId} AND id = ${webhookId}::uuid) w
      LEFT JOIN LATERAL (
        SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d WHERE d.webhook_id = w.id
        ORDER BY d.created_at DESC, d.id DESC LIMIT ${limit}
      ) d ON true`),
  );
  if (rows.length === 0) return null;
  return rows.filter((r) => r.id !== null).map(toDelivery);
}

/**
 * A delivery due again now (any state: a delivered one is sent again under the same id), and the
 * senders woken. Its retry window still counts from the event: one past WEBHOOK_LIMITS.retryForMs
 * gets this one attempt, then is `failed` again if it fails. Null when the tenant has no such delivery
 * of that endpoint.
 */
export async function retryDelivery(
  db: Db,
  tenantId: string,
  webhookId: string,
  deliveryId: string,
): Promise<DeliveryView | null> {
  if (!isUuid(webhookId) || !isUuid(deliveryId)) return null;
  const rows = resultRows<RawDelivery>(
    await db.execute(sql`
      WITH d AS (
        UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = now(), finished_at = NULL
        WHERE id = ${deliveryId}::uuid AND webhook_id = ${webhookId}::uuid AND tenant_id = ${tenantId}
        RETURNING *
      ), wake AS (SELECT pg_notify('ear_webhook', '') FROM d)
      SELECT ${DELIVERY_COLUMNS}, (SELECT count(*) FROM wake) AS woken FROM d`),
  );
  return rows[0] ? toDelivery(rows[0]) : null;
}

/** A delivery a sender holds for one attempt. */
export interface ClaimedDelivery {
  id: string;
  webhookId: string;
  tenantId: string;
  jobId: string;
  eventType: WebhookEventType;
  /** This attempt's number (from 1): the result is written only while the row is at it. */
  attempt: number;
  url: string;
  secret: string;
  /** The body an earlier attempt sent (null before the first). */
  payload: string | null;
  createdAt: Date;
}

/**
 * Claim due deliveries for one host, fair across tenants and endpoints:
 * - at most `free` in all;
 * - per endpoint, at most `perEndpoint` (1 while it is failing, WEBHOOK_LIMITS.pauseAfterFailures
 *   in a row: a probe) minus what this host already has in flight there (`busy`), none while it
 *   is paused, oldest due first within each endpoint, so one endpoint's backlog never crowds out
 *   another's;
 * - per tenant, at most its share of the host's `concurrency` minus what this host already has in
 *   flight for it (`busyTenants`): concurrency / n with n tenants due or in flight here, and
 *   never above `shareAlone` of it, so a tenant alone leaves slots free for the next one's first
 *   delivery;
 * - taken in turns across tenants (every tenant's oldest due, then every one's second, …), not
 *   in one global order where one tenant's burst would stand in front of everyone else's rows.
 * SKIP LOCKED: concurrent hosts claim disjoint rows. The lease is `leaseMs` (the attempt's
 * timeout and a margin). Also how long until the next row or pause comes due (null: none), so a
 * sender can sleep until then; rows due now and held back by a cap are claimed when one of this
 * host's attempts ends (it wakes the sender).
 */
export async function claimDeliveries(
  db: Db,
  opts: {
    free: number;
    concurrency: number;
    shareAlone: number;
    perEndpoint: number;
    failingAfter: number;
    busy: Record<string, number>;
    busyTenants: Record<string, number>;
    leaseMs: number;
  },
): Promise<{ claimed: ClaimedDelivery[]; nextInMs: number | null }> {
  const alone = Math.max(1, Math.floor(opts.concurrency * opts.shareAlone));
  // With no free slot nothing is claimed, but the statement still says when the next row is due.
  const rows = resultRows<{
    id: string | null;
    webhook_id: string;
    tenant_id: string;
    job_id: string;
    event_type: WebhookEventType;
    attempts: number;
    url: string;
    secret: string;
    payload: string | null;
    created_at: string | Date;
    next_in_ms: string | number | null;
  }>(
    await db.execute(sql`
      WITH due AS (
        SELECT DISTINCT webhook_id FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= now()
      ), open AS (
        SELECT w.id AS webhook_id, w.tenant_id,
          CASE WHEN w.consecutive_failures >= ${opts.failingAfter}::int THEN 1 ELSE ${opts.perEndpoint}::int END
            - coalesce((${JSON.stringify(opts.busy)}::jsonb ->> w.id::text)::int, 0) AS room
        FROM due JOIN webhooks w ON w.id = due.webhook_id
        WHERE w.paused_until IS NULL OR w.paused_until <= now()
      ), share AS (
        SELECT greatest(1, least(${alone}::int, ${opts.concurrency}::int / greatest(1, count(*))))::int AS cap
        FROM (SELECT tenant_id FROM open UNION SELECT jsonb_object_keys(${JSON.stringify(opts.busyTenants)}::jsonb)) t
      ), candidates AS (
        SELECT x.id, x.tenant_id, x.next_attempt_at FROM open o CROSS JOIN LATERAL (
          SELECT x.id, x.tenant_id, x.next_attempt_at FROM webhook_deliveries x
          WHERE x.webhook_id = o.webhook_id AND x.state = 'pending' AND x.next_attempt_at <= now()
          ORDER BY x.next_attempt_at
          LIMIT greatest(0, o.room)
          FOR UPDATE SKIP LOCKED
        ) x
      ), pick AS (
        SELECT r.id FROM (
          SELECT c.id, c.tenant_id, c.next_attempt_at,
            row_number() OVER (PARTITION BY c.tenant_id ORDER BY c.next_attempt_at, c.id) AS turn
          FROM candidates c
        ) r CROSS JOIN share s
        WHERE r.turn <= s.cap - coalesce((${JSON.stringify(opts.busyTenants)}::jsonb ->> r.tenant_id)::int, 0)
        ORDER BY r.turn, r.next_attempt_at
        LIMIT ${Math.max(0, opts.free)}::int
      ), claimed AS (
        UPDATE webhook_deliveries d SET attempts = d.attempts + 1,
          next_attempt_at = now() + make_interval(secs => ${opts.leaseMs / 1000}::float8)
        FROM pick, webhooks w
        WHERE d.id = pick.id AND w.id = d.webhook_id
        RETURNING d.id, d.webhook_id, d.tenant_id, d.job_id, d.event_type, d.attempts, w.url, w.secret, d.payload,
          d.created_at
      ), soonest AS (
        -- The next row or pause to come due. Rows due now that a cap held back are not counted
        -- (they would make the sender spin): a finishing attempt wakes it for them.
        SELECT extract(epoch FROM least(
          (SELECT min(next_attempt_at) FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at > now()),
          (SELECT min(paused_until) FROM webhooks WHERE paused_until > now())
        ) - now()) * 1000 AS next_in_ms
      )
      SELECT c.*, s.next_in_ms FROM soonest s LEFT JOIN claimed c ON true`),
  );
  const head = rows[0];
  const claimed = rows
    .filter((r) => r.id !== null)
    .map((r) => ({
      id: r.id as string,
      webhookId: r.webhook_id,
      tenantId: r.tenant_id,
      jobId: r.job_id,
      eventType: r.event_type,
      attempt: Number(r.attempts),
      url: r.url,
      secret: r.secret,
      payload: r.payload,
      createdAt: new Date(r.created_at),
    }));
  const next = head?.next_in_ms;
  return { claimed, nextInMs: next === null || next === undefined ? null : Math.max(0, Number(next)) };
}

/** How an attempt ended. `retryInMs` null: no retry (delivered, or out of time: failed). */
export interface AttemptResult {
  statusCode: number | null;
  error: string | null;
  durationMs: number;
  delivered: boolean;
  /** Null when the delivery ends now (delivered, or its retries are over). */
  retryInMs: number | null;
  /** The body sent, kept so that every later attempt sends the same bytes (null: none was built). */
  payload: string | null;
}

/**
 * The attempt's row and the delivery's next state in one statement, fenced by the attempt number.
 * Returns false when the row had moved on (another sender holds a newer attempt).
 */
export async function recordAttempt(db: Db, d: ClaimedDelivery, r: AttemptResult): Promise<boolean> {
  const state = r.delivered ? "delivered" : r.retryInMs === null ? "failed" : "pending";
  const failing = WEBHOOK_LIMITS.pauseAfterFailures;
  const rows = resultRows<{ id: string }>(
    await db.execute(sql`
      WITH d AS (
        UPDATE webhook_deliveries SET state = ${state},
          payload = coalesce(payload, ${r.payload}::text),
          next_attempt_at = CASE WHEN ${state} = 'pending'
            THEN now() + make_interval(secs => ${(r.retryInMs ?? 0) / 1000}::float8) ELSE next_attempt_at END,
          finished_at = CASE WHEN ${state} = 'pending' THEN NULL ELSE now() END
        WHERE id = ${d.id}::uuid AND attempts = ${d.attempt}::int AND state = 'pending'
        RETURNING id, webhook_id
      ), health AS (
        -- The endpoint's run of failures. At pauseAfterFailures in a row it is paused; a failure
        -- that lands while it is paused (an attempt that was already in flight) leaves the pause
        -- as it is, and the next one after it (the probe) doubles it. A success clears it all.
        UPDATE webhooks w SET
          consecutive_failures = CASE WHEN ${r.delivered}::boolean THEN 0 ELSE w.consecutive_failures + 1 END,
          pause_ms = CASE WHEN ${r.delivered}::boolean THEN 0
            WHEN w.consecutive_failures + 1 >= ${failing}::int AND (w.paused_until IS NULL OR w.paused_until <= now())
              THEN least(${WEBHOOK_LIMITS.pauseMaxMs}::int,
                CASE WHEN w.pause_ms = 0 THEN ${WEBHOOK_LIMITS.pauseBaseMs}::int ELSE w.pause_ms * 2 END)
            ELSE w.pause_ms END,
          paused_until = CASE WHEN ${r.delivered}::boolean THEN NULL
            WHEN w.consecutive_failures + 1 >= ${failing}::int AND (w.paused_until IS NULL OR w.paused_until <= now())
              THEN now() + make_interval(secs => least(${WEBHOOK_LIMITS.pauseMaxMs}::int,
                CASE WHEN w.pause_ms = 0 THEN ${WEBHOOK_LIMITS.pauseBaseMs}::int ELSE w.pause_ms * 2 END) / 1000.0)
            ELSE w.paused_until END,
          pause_reason = CASE WHEN ${r.delivered}::boolean THEN NULL
            WHEN w.consecutive_failures + 1 >= ${failing}::int AND (w.paused_until IS NULL OR w.paused_until <= now())
              THEN (w.consecutive_failures + 1) || ' consecutive failed attempts; last: ' || ${r.error ?? "failed"}::text
            ELSE w.pause_reason END
        FROM d WHERE w.id = d.webhook_id
      )
      INSERT INTO webhook_attempts (delivery_id, attempted_at, status_code, error, duration_ms)
      SELECT id, now() - make_interval(secs => ${r.durationMs / 1000}::float8), ${r.statusCode}::int, ${r.error},
        ${Math.round(r.durationMs)}::int
      FROM d
      RETURNING delivery_id AS id`),
  );
  return rows.length > 0;
}

/**
 * Deliveries recorded `dropped` (their tenant was at WEBHOOK_LIMITS.maxPendingPerTenant), summed
 * per tenant over its endpoints, the `limit` tenants with the most; for the hosts' /metrics.
 */
export async function droppedDeliveriesByTenant(
  db: Db,
  limit: number,
): Promise<Array<{ tenantId: string; dropped: number }>> {
  const rows = resultRows<{ tenant_id: string; dropped: string | number }>(
    await db.execute(sql`
      SELECT tenant_id, sum(dropped_deliveries) AS dropped FROM webhooks WHERE dropped_deliveries > 0
      GROUP BY tenant_id ORDER BY dropped DESC, tenant_id LIMIT ${limit}::int`),
  );
  return rows.map((r) => ({ tenantId: r.tenant_id, dropped: Number(r.dropped) }));
}

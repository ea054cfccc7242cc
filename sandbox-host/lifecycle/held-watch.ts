/**
 * Sleeping while runs are held elsewhere: the other hosts sleep (lifecycle/sleep.ts) while the
 * fleet's only work is runs whose owners are alive, and a host that dies holding runs still has
 * them recovered within the lost bound (HOST_RUN_LOST_AFTER_MS + ≤ 1.3 × HOST_REAP_MS), as when
 * every host was awake. Liveness is carried by a Postgres advisory lock, so it costs no statement:
 *
 *  - An owner (a host with runs) holds HELD_RUNS_LOCK in shared mode on its heartbeat session,
 *    taken before that session's first statement (holdRunsLock). The session carries every heartbeat, and
 *    its `idle_session_timeout` is the lost bound, so Postgres ends it, and the lock, when the
 *    host dies (its socket closes), is cut off (TCP keepalive), or stops heartbeating for the
 *    lost bound (a frozen process, whose kernel still answers keepalives): exactly when its runs
 *    may be reaped, never later. After the host's last run ends the session goes the same way.
 *  - A host about to sleep over held runs (HeldRunsWatch) opens a session of its own and asks for
 *    the lock in exclusive mode: granted at once, no owner holds it (an owner of an older build,
 *    or one whose heartbeat session has not connected yet), so it stays awake as before; else
 *    its request waits, one statement in flight and none sent, until the last holder's session
 *    ends. Then it wakes: on its busy cadence the reaper finds the silent runs within the bound.
 *
 * While any owner holds the lock, every owner that heartbeats holds it or is awake anyway: an
 * owner's own reaper runs every HOST_REAP_MS, so one owner dying while another lives is reaped by
 * that one, as before. Only the last holder's end needs a sleeper, and that is what the lock wait
 * reports. A waiting exclusive request makes a new shared request wait too (Postgres queues it
 * behind), so an owner only *tries* the lock (pg_try_advisory_lock_shared: never waits, its
 * heartbeat is not delayed) and tries again at most every HELD_LOCK_RETRY_MS while it holds none.
 *
 * Why a lock and not Redis: a dead host sends nothing, so a sleeper must either ask (one Redis
 * command or one statement per lost bound, 8 s, where the budget is one command a minute) or be
 * told by something that outlives the host; Postgres ends a dead client's session, and its locks,
 * on its own. The gateway's cron keeps its backstops running while any sleeper sleeps over held
 * runs (src/quota/fleet-wake.ts, anySleeper): the bound when no host is left at all.
 */
import pg from "pg";
import { errorFields, type Logger } from "../log";

/** The advisory lock key ("ear held runs"); one database per deployment, so one key. */
export const HELD_RUNS_LOCK = "4712022040001";
/** An owner without the lock (a sleeper's request was queued when it tried) tries again this often. */
export const HELD_LOCK_RETRY_MS = 5000;

/**
 * The owner's half, on the lease pool (host-parts.ts heartbeatPool: the heartbeat's and the
 * started CAS's connections, direct sessions): each new connection gets the lost bound as its
 * idle_session_timeout and tries the shared lock in the same round trip, before the statement
 * that checked it out; a connection that got none tries again before a later statement, at most
 * every HELD_LOCK_RETRY_MS. Only on a pool of its own: the runs' pool is not tied to liveness.
 *
 * The try runs on the checkout path (the pool's `connect`, which its `query` also goes through)
 * and is awaited before the client is handed out. On the pool's 'connect'/'acquire' events it
 * could only be fired and forgotten (pg-pool does not wait for listeners), so the caller's
 * statement was sent while the try was in flight, which node-postgres warns about ("Calling
 * client.query() when the client is already executing a query") and pg 9 will refuse.
 */
export function holdRunsLock(pool: pg.Pool, opts: { lostAfterMs: number; log: Logger }): void {
  const holding = new WeakMap<pg.PoolClient, boolean>();
  let lastTryAt = 0;
  let warned = false;
  const tryLock = async (client: pg.PoolClient, setTimeout: boolean): Promise<void> => {
    lastTryAt = Date.now();
    // One simple-protocol round trip; when the SET fails (Postgres < 14) the SELECT does not run,
    // and the lock is not taken: a frozen host could not be told from a live one.
    const text = `${setTimeout ? `SET idle_session_timeout = ${Math.round(opts.lostAfterMs)}; ` : ""}SELECT pg_try_advisory_lock_shared(${HELD_RUNS_LOCK}) AS held`;
    try {
      const res = (await client.query(text)) as pg.QueryResult | pg.QueryResult[];
      const results = Array.isArray(res) ? res : [res];
      const last = results[results.length - 1] as pg.QueryResult<{ held: boolean }> | undefined;
      holding.set(client, last?.rows[0]?.held === true);
    } catch (err) {
      // Not the caller's failure: its own statement follows on this client and reports a broken one.
      holding.set(client, false);
      if (setTimeout && !warned) {
        warned = true;
        opts.log.warn("held-run lock not taken: other hosts stay awake while this one holds runs", errorFields(err));
      }
    }
  };
  const checkout = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  const prepared = async (): Promise<pg.PoolClient> => {
    const client = await checkout();
    const held = holding.get(client);
    if (held === undefined) await tryLock(client, true);
    else if (!held && Date.now() - lastTryAt >= HELD_LOCK_RETRY_MS) await tryLock(client, false);
    return client;
  };
  type Done = (release?: unknown) => void;
  // Both of pg-pool's forms: a promise (transactions), a callback (its own `query`).
  (pool as unknown as { connect: unknown }).connect = (
    cb?: (err: Error | undefined, client: pg.PoolClient | undefined, done: Done) => void,
  ) => {
    if (!cb) return prepared();
    prepared().then(
      (client) => cb(undefined, client, client.release as Done),
      (err: Error) => cb(err, undefined, () => {}),
    );
    return undefined;
  };
}

/** The sleeper's half (lifecycle/sleep.ts): whether an owner holds the lock, and when none does. */
export interface HeldWatch {
  /**
   * null: no owner holds the lock, so this host may not sleep over the held runs. Else
   * `released`, which resolves when the last holder's session has ended (or rejects when the
   * watch's own session fails): wake then. (Wrapped: an async function would flatten a promise.)
   */
  arm(): Promise<{ released: Promise<void> } | null>;
  /** Ends the watch's session (and its waiting request, or the lock it was granted). */
  disarm(): void;
}

export class HeldRunsWatch implements HeldWatch {
  private client: pg.Client | null = null;

  constructor(private readonly opts: { databaseUrl: string; log: Logger }) {}

  async arm(): Promise<{ released: Promise<void> } | null> {
    this.disarm();
    const client = new pg.Client({ connectionString: this.opts.databaseUrl, keepAlive: true });
    // An error on an idle or ended client must not kill the process; the wait's promise reports it.
    client.on("error", () => {});
    this.client = client;
    try {
      await client.connect();
      // A backend waiting on a lock does not read its socket: with this it notices within 1 s
      // that the client went (a host that woke and closed this session, or died), and leaves the
      // queue, where its request would keep owners from taking the shared lock.
      await client.query(
        "SET client_connection_check_interval = 1000; SET statement_timeout = 0; SET lock_timeout = 0",
      );
      const { rows } = await client.query<{ free: boolean }>(`SELECT pg_try_advisory_lock(${HELD_RUNS_LOCK}) AS free`);
      if (rows[0]?.free === true) {
        this.disarm();
        return null;
      }
    } catch (err) {
      this.disarm();
      throw err;
    }
    // Sent, and in flight until the last holder's session ends: no other statement while asleep.
    const released = client.query(`SELECT pg_advisory_lock(${HELD_RUNS_LOCK})`).then(() => {
      if (this.client === client) this.disarm();
    });
    return { released };
  }

  disarm(): void {
    const client = this.client;
    this.client = null;
    client
      ?.end()
      .catch((err: unknown) => this.opts.log.info("held-run watch session not closed cleanly", errorFields(err)));
  }
}

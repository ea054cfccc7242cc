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
 * While any owner holds the lock, one owner dying while another lives is the other's to find: a
 * busy owner's reaper runs every HOST_REAP_MS, and a quiet one watches each other owner's own
 * lock (HOST_LOCK_CLASS, hostLockKey; OwnersWatch below), which every heartbeat session of that
 * owner holds beside the shared one. Only the last holder's end needs a sleeper, and that is what
 * the shared lock's wait reports. A waiting exclusive request makes a new shared request wait too (Postgres queues it
 * behind), so an owner only *tries* the lock (pg_try_advisory_lock_shared: never waits, its
 * heartbeat is not delayed) and tries again at most every HELD_LOCK_RETRY_MS while it holds none.
 *
 * Why a lock and not Redis: a dead host sends nothing, so a sleeper must either ask (one Redis
 * command or one statement per lost bound, 8 s, where the budget is one command a minute) or be
 * told by something that outlives the host; Postgres ends a dead client's session, and its locks,
 * on its own. The gateway's cron keeps its backstops running while any sleeper sleeps over held
 * runs (src/quota/fleet-wake.ts, anySleeper): the bound when no host is left at all.
 */
import { createHash } from "node:crypto";
import pg from "pg";
import { errorFields, type Logger } from "../log";

/** The advisory lock key ("ear held runs"); one database per deployment, so one key. */
export const HELD_RUNS_LOCK = "4712022040001";
/** An owner without the lock (a sleeper's request was queued when it tried) tries again this often. */
export const HELD_LOCK_RETRY_MS = 5000;

/**
 * The class of each owner's own lock (the two-key form: this class, hostLockKey(host)), held in
 * shared mode beside HELD_RUNS_LOCK by every heartbeat session of that host, so another owner can
 * wait for that one host's end (OwnersWatch).
 */
export const HOST_LOCK_CLASS = 47120220;

/**
 * A host's own lock key: the first 4 bytes of SHA-256 of its id, as a signed int4. Two hosts
 * sharing one (a chance of about n²/2³³ in a fleet of n) only make a watcher of one wait for
 * both: it wakes late for the first death, and the reaper of a busy host still bounds it.
 */
export function hostLockKey(hostId: string): number {
  return createHash("sha256").update(hostId).digest().readInt32BE(0);
}

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
export function holdRunsLock(
  pool: pg.Pool,
  opts: {
    lostAfterMs: number;
    log: Logger;
    /** This host: its own lock (hostLockKey) is held too, for the other owners' watch (OwnersWatch). */
    hostId?: string;
  },
): void {
  /** Per session: whether it holds the owners' lock, and this host's own (absent: not asked). */
  const holding = new WeakMap<pg.PoolClient, { held: boolean; own: boolean }>();
  const own = opts.hostId === undefined ? null : hostLockKey(opts.hostId);
  let lastTryAt = 0;
  let warned = false;
  const tryLock = async (client: pg.PoolClient, was: { held: boolean; own: boolean } | undefined): Promise<void> => {
    lastTryAt = Date.now();
    // One simple-protocol round trip; when the SET fails (Postgres < 14) the SELECT does not run,
    // and the lock is not taken: a frozen host could not be told from a live one. A retry asks
    // only for what the session lacks (a shared lock asked twice is held twice).
    const held = was?.held ? "true" : `pg_try_advisory_lock_shared(${HELD_RUNS_LOCK})`;
    const mine = own === null || was?.own ? "true" : `pg_try_advisory_lock_shared(${HOST_LOCK_CLASS}, ${own})`;
    const text = `${was ? "" : `SET idle_session_timeout = ${Math.round(opts.lostAfterMs)}; `}SELECT ${held} AS held, ${mine} AS own`;
    try {
      const res = (await client.query(text)) as pg.QueryResult | pg.QueryResult[];
      const results = Array.isArray(res) ? res : [res];
      const last = results[results.length - 1] as pg.QueryResult<{ held: boolean; own: boolean }> | undefined;
      holding.set(client, { held: last?.rows[0]?.held === true, own: last?.rows[0]?.own === true });
    } catch (err) {
      // Not the caller's failure: its own statement follows on this client and reports a broken one.
      holding.set(client, { held: was?.held === true, own: was?.own === true });
      if (!was && !warned) {
        warned = true;
        opts.log.warn("held-run lock not taken: other hosts stay awake while this one holds runs", errorFields(err));
      }
    }
  };
  const checkout = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  const prepared = async (): Promise<pg.PoolClient> => {
    const client = await checkout();
    const was = holding.get(client);
    if (was === undefined) await tryLock(client, undefined);
    else if (!(was.held && was.own) && Date.now() - lastTryAt >= HELD_LOCK_RETRY_MS) await tryLock(client, was);
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

/** A session of its own for waiting on an advisory lock (HeldRunsWatch, OwnersWatch). */
function lockWaitClient(databaseUrl: string): pg.Client {
  const client = new pg.Client({ connectionString: databaseUrl, keepAlive: true });
  // An error on an idle or ended client must not kill the process; the wait's promise reports it.
  client.on("error", () => {});
  return client;
}

/**
 * Connects `client` and asks for the advisory lock `key` (its SQL arguments) in exclusive mode:
 * null when granted at once (no holder, nothing to wait for: the caller ends the session); else
 * the request, sent and in flight with nothing sent after it, whose `granted` resolves when the
 * last holder's session has ended and rejects when this session fails. (Wrapped: an async
 * function would flatten a promise.)
 */
async function waitForLock(client: pg.Client, key: string): Promise<{ granted: Promise<unknown> } | null> {
  await client.connect();
  // A backend waiting on a lock does not read its socket: with the check interval it notices
  // within 1 s that the client went (a host that woke and closed this session, or died), and
  // leaves the queue, where its request would keep owners from taking their shared locks.
  const results = (await client.query(
    `SET client_connection_check_interval = 1000; SET statement_timeout = 0; SET lock_timeout = 0; SELECT pg_try_advisory_lock(${key}) AS free`,
  )) as unknown as pg.QueryResult<{ free?: boolean }>[];
  if (results[results.length - 1]?.rows[0]?.free !== false) return null;
  return { granted: client.query(`SELECT pg_advisory_lock(${key})`) };
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
    const client = lockWaitClient(this.opts.databaseUrl);
    this.client = client;
    let wait: { granted: Promise<unknown> } | null;
    try {
      wait = await waitForLock(client, HELD_RUNS_LOCK);
    } catch (err) {
      this.disarm();
      throw err;
    }
    if (!wait) {
      this.disarm();
      return null;
    }
    // In flight until the last holder's session ends: no other statement while asleep.
    const released = wait.granted.then(() => {
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

/** The most other owners a quiet owner watches (a session each); past it the owner stays busy. */
export const MAX_WATCHED_OWNERS = 4;

/**
 * An owner's watch on the other owners (lifecycle/activity.ts, a host quiet over its runs while
 * others hold runs too): one session per other owner, each with a request for that owner's own
 * lock (hostLockKey) in exclusive mode, waiting, one statement in flight and none sent, until
 * every session of that host has ended (it died, froze past the lost bound, or its last run
 * ended). `onReleased` is then called: the host goes busy and its reaper, on the busy cadence,
 * finds the silent runs within the lost bound, as when every owner was awake. The same waits as
 * HeldRunsWatch, one per owner, since a quiet owner cannot wait on HELD_RUNS_LOCK: it holds it.
 */
export class OwnersWatch {
  private readonly watches = new Map<string, pg.Client>();

  constructor(private readonly opts: { databaseUrl: string; log: Logger; onReleased: (owner: string) => void }) {}

  /** How many owners are watched now. */
  get size(): number {
    return this.watches.size;
  }

  /**
   * Watch exactly `owners` (the look's other owners): keep the watches already armed for them,
   * end the others', arm the new ones. False when one cannot be watched (it holds no lock of its
   * own: an older build, a pooler URL, or it is already gone) or a session failed: the caller
   * stays busy, and the watches are ended.
   */
  async watch(owners: readonly string[]): Promise<boolean> {
    for (const owner of [...this.watches.keys()]) if (!owners.includes(owner)) this.end(owner);
    try {
      for (const owner of owners) {
        if (this.watches.has(owner)) continue;
        if (!(await this.arm(owner))) {
          this.clear();
          return false;
        }
      }
      return true;
    } catch (err) {
      this.opts.log.warn("cannot watch the other owners; staying busy", errorFields(err));
      this.clear();
      return false;
    }
  }

  private async arm(owner: string): Promise<boolean> {
    const client = lockWaitClient(this.opts.databaseUrl);
    this.watches.set(owner, client);
    // Granted at once: that owner holds no lock of its own (the caller ends this session).
    const wait = await waitForLock(client, `${HOST_LOCK_CLASS}, ${hostLockKey(owner)}`);
    if (!wait) return false;
    // Granted, or failed (Postgres went, the session was cut): either way the owner is no longer
    // watched, so the host is busy. A watch ended on purpose (end, clear) is no longer in the map
    // and reports nothing.
    const done = () => {
      if (this.watches.get(owner) !== client) return;
      this.end(owner);
      this.opts.onReleased(owner);
    };
    wait.granted.then(done, done);
    return true;
  }

  private end(owner: string): void {
    const client = this.watches.get(owner);
    this.watches.delete(owner);
    client
      ?.end()
      .catch((err: unknown) => this.opts.log.info("owner watch session not closed cleanly", errorFields(err)));
  }

  /** Ends every watch (the host went busy, or has no runs). */
  clear(): void {
    for (const owner of [...this.watches.keys()]) this.end(owner);
  }
}

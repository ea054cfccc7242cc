/**
 * Whether the fleet is idle, as one host knows it, so the host's periodic loops can stop asking
 * Postgres and Redis about work that is not there. Idle means all of:
 *  - no run on this host;
 *  - its LISTEN connection is up, so every job that becomes claimable anywhere is announced to it
 *    (ear_ready: inserted, or released by a reaper) without asking;
 *  - its last look at Postgres (`fleetWork`, one statement) found no job waiting, claimed or
 *    running anywhere, and nothing was announced, claimed or reconnected since that look began.
 * Anything else is busy, and every loop keeps the cadence it had before idleness existed, so the
 * recovery bounds where work runs are unchanged. `noteWork()` (an announcement, a claim, the
 * listener connecting or dropping, a look that found work) ends idleness at once and hurries
 * every loop sleeping an idle period back to its busy one.
 *
 * An idle host whose look also found nothing due for a while goes to sleep (lifecycle/sleep.ts):
 * no statement at all until a Redis wake-up or the soonest known deadline.
 *
 * A host whose own runs are the fleet's only work (its look found nothing waiting, claimed,
 * expiring or running on another host) is idle too, with them (`ownRunsOnly`): its loops go to
 * the idle cadence and only its runs' heartbeats keep their pace. Its own runs need no reaper of
 * its own (they are alive while it is); its death is seen by the others, asleep over its held-run
 * lock, quiet owners watching its own lock (`ownersWatch`, held-watch.ts OwnersWatch), or awake
 * and busy (an owner that cannot watch another reaps it on the busy cadence). An owner whose look
 * finds runs held by at most MAX_WATCHED_OWNERS other hosts, and nothing else, is quiet with
 * them once each of those owners is watched; a watch granted (that owner gone) is news, and the
 * watches go whenever the host is busy again. It looks for that when it has runs and
 * nothing happened for BUSY_LOOK_GAP_MS (no announcement, no claim): a host claiming under load
 * never does; and it never sleeps (the Redis wake-up is for hosts without runs: this one keeps
 * its LISTEN session, which the heartbeats keep the compute up for anyway).
 *
 * Runs held by other hosts are work (the reaper must find a silent one within the lost bound),
 * except on a host that can watch their owners without asking (`watchesHeld`, lifecycle/
 * held-watch.ts): there a look that finds only running jobs leaves the host quiet, with `held`
 * set, and it sleeps with the watch armed; when the watch cannot be armed it calls noteWork().
 * While idle and awake the host's only Postgres statements are the look itself and the retention purge
 * (and the sandbox janitor's question when labelled sandboxes exist), one each per HOST_IDLE_MS
 * (default 60 s), and it sends no Redis command at all; the measured before/after is in
 * docs/deploy.md, "The cost of an idle host".
 * What a lost announcement costs is bounded by the look: a job nobody was told about is seen
 * waiting (or running) at the next look, at most HOST_IDLE_MS (+30 % jitter) later.
 *
 * No leader: each host looks for itself. An election would cost statements of its own (a lease
 * renewed, a lock polled) for a saving of one statement a minute per host, and would add a
 * failure mode (a leader that stops looking) the per-host look does not have.
 */

import { MAX_WATCHED_OWNERS } from "./held-watch";

/** What one look at Postgres found anywhere in the fleet (src/db/reaper-repo.ts, fleetWork). */
export interface FleetWork {
  /** Queued and unclaimed: a claimer should take it. */
  waiting: boolean;
  /** Claimed and not started: the reaper releases it if its claimant dies. */
  claimed: boolean;
  /** Running: the reaper calls it lost if its owner stops heartbeating. */
  running: boolean;
  /** Running on another host than the one that looked (absent or null: not asked, so unknown). */
  runningElsewhere?: boolean | null;
  /** Those hosts, at most MAX_WATCHED_OWNERS + 1 (absent or null: not asked). */
  ownersElsewhere?: string[] | null;
  /**
   * A job in `waiting` whose approval deadline falls before the next idle look, a queued job whose
   * ttl does, or a running one whose deadline does: the reaper must end it on time, so the fleet
   * stays busy until it has. Jobs that merely wait are not work: no host holds them.
   */
  expiring?: boolean;
  /**
   * A run over (lost, say) whose sandbox cleanup fence is still set: the sandbox janitor must
   * remove it, and it skips its passes while the host sleeps, so the fleet stays busy until then.
   */
  cleanup?: boolean;
  /** An eval case whose job ended waits for its scores: the eval scorer's work (evals/eval-scorer.ts). */
  scoring?: boolean;
  /** Milliseconds until the soonest known deadline (null: none known; absent: not asked). */
  nextDueInMs?: number | null;
}

/**
 * A host without runs in a busy fleet looks at most this often to learn that the fleet went
 * quiet (and at once when its own last run ends): one extra statement per 10 s while other hosts
 * work, in exchange for going idle within ~10 s of the fleet's last run ending.
 */
export const BUSY_LOOK_GAP_MS = 10_000;

export class FleetActivity {
  private quiet = false;
  /** Host start counts as news: nothing is known about the fleet yet. */
  private lastWorkAt = Date.now();
  private lastLookAt = Number.NEGATIVE_INFINITY;
  private lastLocalEndAt = 0;
  /** The last quiet look found this host's own runs and nothing else (see above). */
  private ownRunsOnly = false;
  /** The last look failed (lookFailed), so nothing is known about waiting jobs. */
  private unsure = false;
  private readonly listeners = new Set<() => void>();
  private readonly quietListeners = new Set<(work: FleetWork) => void>();
  /** lifecycle/sleep.ts: LISTEN is closed on purpose and the Redis wake-up stands in for it. */
  private sleeping = false;

  constructor(
    private readonly opts: {
      /** HOST_IDLE_MS; 0 = never idle (every loop keeps its busy cadence). */
      idleMs: number;
      localRuns: () => number;
      /** The LISTEN connection is up (announcements reach this host). */
      listening: () => boolean;
      /**
       * This host sleeps over runs held elsewhere with their owners watched (lifecycle/
       * held-watch.ts): a look that finds only running jobs leaves it quiet. Absent or false:
       * running jobs anywhere keep it busy.
       */
      watchesHeld?: () => boolean;
      /**
       * How long after this host's own last run its heartbeat session may still hold the owners'
       * lock (HOST_RUN_LOST_AFTER_MS, the session's idle_session_timeout, plus a margin): no sleep
       * over held runs until then, or its watch would wait on its own session and wake only when
       * that ends, late for a run whose owner died meanwhile.
       */
      ownLockMs?: number;
      /**
       * A host with runs watches the other owners (lifecycle/held-watch.ts, OwnersWatch): a look
       * that finds runs held by at most MAX_WATCHED_OWNERS other hosts, and nothing else, leaves
       * it quiet once all of them are watched. Absent: a run held elsewhere keeps an owner busy.
       */
      ownersWatch?: {
        watch(owners: readonly string[]): Promise<boolean>;
        clear(): void;
        readonly size: number;
      };
    },
  ) {}

  /**
   * Quiet over its own runs with every other owner watched (no run of another host needs this
   * host's reaper until a watch reports that owner's end, which ends the quiet).
   */
  get ownersWatched(): boolean {
    return this.idle && this.ownRunsOnly && (this.opts.ownersWatch?.size ?? 0) > 0;
  }

  get idleMs(): number {
    return this.opts.idleMs;
  }

  get idle(): boolean {
    return this.quiet && (this.opts.localRuns() === 0 || this.ownRunsOnly) && (this.sleeping || this.opts.listening());
  }

  /**
   * Idle and asleep (lifecycle/sleep.ts): no loop touches Postgres until a wake-up or the known
   * deadline; each loop's pass returns without a statement.
   */
  get asleep(): boolean {
    return this.sleeping;
  }

  setAsleep(asleep: boolean): void {
    this.sleeping = asleep;
  }

  /** Call `fn` with the look's findings each time a look leaves the host idle (the sleep's cue). */
  onQuiet(fn: (work: FleetWork) => void): () => void {
    this.quietListeners.add(fn);
    return () => this.quietListeners.delete(fn);
  }

  /** Call `fn` whenever idleness ends (a loop cuts an idle sleep short). */
  onWork(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /**
   * Work may exist: a job was announced or claimed, or the listener connected or dropped (what
   * was announced meanwhile is unknown). Every input of `idle` that can turn it false without a
   * look comes through here, so a loop scheduled on an idle period is always hurried.
   */
  noteWork(): void {
    this.lastWorkAt = Date.now();
    if (!this.quiet) return;
    this.quiet = false;
    // Busy again: this host's reaper watches every run elsewhere, so the watch sessions go.
    this.opts.ownersWatch?.clear();
    for (const fn of this.listeners) fn();
  }

  /**
   * A run here ended: after the last one, look soon rather than after BUSY_LOOK_GAP_MS. On a host
   * quiet over its own runs, any run's end is news: it may leave work no announcement tells of (an
   * eval case to score, a sandbox to remove), which the busy loops then find as they did before.
   */
  localRunEnded(): void {
    if (this.opts.localRuns() === 0) this.lastLocalEndAt = Date.now();
    if (this.quiet && this.ownRunsOnly) this.noteWork();
  }

  /** Whether the reaper's pass should look at the fleet's work now. */
  shouldLook(now = Date.now()): boolean {
    if (this.opts.idleMs === 0 || !this.opts.listening()) return false;
    // With runs here: only after BUSY_LOOK_GAP_MS without news, to learn that this host's own
    // runs are all there is (a host claiming jobs notes work at every claim, and never looks).
    if (this.opts.localRuns() > 0) {
      return !this.quiet && now - this.lastLookAt >= BUSY_LOOK_GAP_MS && now - this.lastWorkAt >= BUSY_LOOK_GAP_MS;
    }
    return this.quiet || now - this.lastLookAt >= BUSY_LOOK_GAP_MS || this.lastLocalEndAt > this.lastLookAt;
  }

  /** Before the look's statement: its start decides whether news arrived while it ran. */
  lookStarting(): number {
    this.lastLookAt = Date.now();
    return this.lastLookAt;
  }

  /**
   * The last look's statement failed: it knows nothing, so the loops that skip their work while
   * idle (the expiry sweep, the index rebuild) do it anyway until a look succeeds.
   */
  lookFailed(): void {
    this.unsure = true;
  }

  /**
   * Idle, and the last look succeeded: nothing waits anywhere, so work that exists only for
   * waiting jobs (expiring them, indexing them) may be skipped.
   */
  get idleAndSure(): boolean {
    return this.idle && !this.unsure;
  }

  async looked(work: FleetWork, startedAt: number): Promise<void> {
    this.unsure = false;
    const local = this.opts.localRuns() > 0;
    // Runs here, and none elsewhere (asked and answered: unknown is not none).
    const ownOnly = local && work.runningElsewhere === false;
    // Runs here and on a few other hosts, each of which this host can watch.
    const others = work.ownersElsewhere ?? [];
    const watchable =
      local &&
      work.runningElsewhere === true &&
      this.opts.ownersWatch !== undefined &&
      others.length > 0 &&
      others.length <= MAX_WATCHED_OWNERS;
    const heldOnly =
      !local &&
      work.running &&
      this.opts.watchesHeld?.() === true &&
      Date.now() - this.lastLocalEndAt >= (this.opts.ownLockMs ?? 0);
    const running = work.running && !(local ? ownOnly || watchable : heldOnly);
    if (work.waiting || work.claimed || running || work.expiring || work.cleanup || work.scoring) {
      this.noteWork();
      return;
    }
    // An announcement while the statement ran may name a job its snapshot did not see.
    if (this.lastWorkAt >= startedAt) return;
    if (watchable) {
      // Quiet only once every other owner is watched; one that cannot be keeps this host busy.
      if (!(await this.opts.ownersWatch?.watch(others))) return this.noteWork();
      // News while the watches were armed (a claim, an announcement, a watch already released):
      // busy, whose reaper watches every run, so the watches go.
      if (this.lastWorkAt >= startedAt) return this.opts.ownersWatch?.clear();
    } else this.opts.ownersWatch?.clear();
    this.quiet = true;
    this.ownRunsOnly = ownOnly || watchable;
    // Sleep (the quiet listeners) is for a host without runs; an owner only slows its loops.
    if (this.idle && !local) for (const fn of this.quietListeners) fn(work);
  }
}

/**
 * A sleeping host: idle (lifecycle/activity.ts) and told by its last look that nothing is due
 * before a known time, it sends Postgres nothing and holds no session of its own until then, so a
 * Neon compute can suspend (after 5 minutes without queries) and stay suspended.
 *
 * Going to sleep, right after the look that found the fleet quiet (one statement, which also read
 * the soonest known deadline: src/db/reaper-repo.ts fleetWork):
 *  1. register in Redis as a sleeper until that deadline (one command, src/quota/fleet-wake.ts);
 *  2. stop reconnecting its LISTEN session: the session is kept while it lasts (idle, it runs no
 *     query, and a NOTIFY on it still wakes the host), but a suspend that closes it is not news;
 *  3. block on its wake list (BLPOP, HOST_WAKE_POLL_MS per command, ≤ 60 s: one Redis command a
 *     minute), until a poke, the deadline, or HOST_SLEEP_MAX_MS.
 * Neon suspends a compute after 5 minutes without active queries; idle sessions do not count, and
 * the suspend closes them. So the pool's one kept connection and the LISTEN session are left
 * alone, and what the suspend closes is reopened only when there is work: pg.Pool drops a closed
 * client and opens one at the next statement, never before; LISTEN reconnects on the wake-up.
 *
 * Waking (a poke from a submit, a chat message, a decision, a schedule change; the deadline; the
 * wait failing) is `activity.noteWork()`: every loop is back on its busy cadence, the claimer reads
 * the ready index at once, LISTEN reconnects if it was closed. A NOTIFY while registering or
 * asleep (while the session lasts) wakes it as well, so there is no window where a job is neither
 * announced nor poked. When Redis cannot be reached the host stays awake on the HOST_IDLE_MS look, as before
 * sleep existed: the wake-up channel is what makes the sleep safe.
 *
 * A look that found runs held elsewhere, and nothing else, is a sleep too when the host watches
 * their owners (lifecycle/held-watch.ts): before registering, the watch is armed (no owner holds
 * the lock: stay awake, busy, as before); registered also as a held sleeper (the cron keeps its
 * backstops); and the end of the last owner's session wakes the host ("released").
 */
import { REGISTER_SLEEPER, UNREGISTER_SLEEPER } from "../../src/quota/fleet-wake";
import type { RedisKeys } from "../../src/quota/keys";
import type { Redis } from "../../src/quota/redis";
import { errorFields, type Logger } from "../log";
import type { FleetActivity } from "./activity";
import type { HeldWatch } from "./held-watch";
import type { Service } from "./service";

/** A sleep shorter than this is not taken: the deadline is as good as now. */
export const MIN_SLEEP_MS = 2000;
/** The sleeper registration outlives the planned sleep by this (the last BLPOP may end a little late). */
const REGISTRATION_MARGIN_MS = 5000;

export interface PausableListener {
  /** Keep the LISTEN session while it lasts, but do not reconnect (nor count its end as news). */
  pause(): void;
  /** Reconnect if the session ended meanwhile (the connect counts as news, as any reconnect). */
  resume(): void;
}

export interface FleetSleepOptions {
  hostId: string;
  activity: FleetActivity;
  redis: Redis;
  keys: RedisKeys;
  /** The Upstash REST endpoint: BLPOP is sent raw (the @upstash/redis client does not have it). */
  rest: { url: string; token: string };
  listener: PausableListener | null;
  /** HOST_SLEEP_MAX_MS (> 0). */
  maxSleepMs: number;
  /** HOST_WAKE_POLL_MS. */
  wakePollMs: number;
  log: Logger;
  fetch?: typeof fetch;
  /** Asleep or awake (metrics). */
  onChange?: (asleep: boolean) => void;
  /** Awake again, and why (the host wakes the loops that keep their own timers). */
  onAwake?: (reason: WakeReason) => void;
  /**
   * Runs before the registration, while the host may still write Postgres: what a sleep would
   * let go stale (the code tool catalog's rows) is dated to the sleep's end. A failure keeps the
   * host awake on the idle look.
   */
  beforeSleep?: (untilMs: number) => Promise<void>;
  /** Watches the owners of held runs (lifecycle/held-watch.ts); without it a held look is never a sleep. */
  heldWatch?: HeldWatch | null;
}

type State = "awake" | "entering" | "asleep";
export type WakeReason = "work" | "poked" | "deadline" | "wait failed" | "released" | "watch failed" | "stop";

export class FleetSleep implements Service {
  readonly name = "fleet sleep";
  private state: State = "awake";
  private stopped = true;
  private abort: AbortController | null = null;
  private loop: Promise<void> | null = null;
  private sleptAt = 0;
  /** Each enter() takes the next number: one that a later enter() or a wake overtook does nothing. */
  private generation = 0;
  /** The score of the registration this host's current sleep made (what unregister removes). */
  private registered = 0;
  private readonly unsubscribe: Array<() => void> = [];

  constructor(private readonly opts: FleetSleepOptions) {}

  get asleep(): boolean {
    return this.state === "asleep";
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.unsubscribe.push(
      this.opts.activity.onQuiet((work) => void this.enter(work.nextDueInMs ?? null, work.running)),
      this.opts.activity.onWork(() => this.wake("work")),
    );
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const u of this.unsubscribe.splice(0)) u();
    this.wake("stop");
    await this.loop;
  }

  /**
   * The fleet is quiet and nothing is due for `nextDueInMs` (null: nothing known): sleep. `held`:
   * the look found runs held elsewhere, so the sleep needs their owners watched.
   */
  async enter(nextDueInMs: number | null, held = false): Promise<void> {
    if (this.state !== "awake" || this.stopped) return;
    const watch = held ? (this.opts.heldWatch ?? null) : null;
    // Not this host's to watch (the activity only reports a held look on a host that watches).
    if (held && !watch) return this.opts.activity.noteWork();
    const sleepMs = Math.min(nextDueInMs ?? Number.POSITIVE_INFINITY, this.opts.maxSleepMs);
    if (sleepMs < MIN_SLEEP_MS) {
      // Quiet over held runs, yet no sleep: they are work, and the reaper's busy cadence watches them.
      if (watch) this.opts.activity.noteWork();
      return;
    }
    const until = Date.now() + sleepMs;
    const score = until + REGISTRATION_MARGIN_MS;
    this.state = "entering";
    const generation = ++this.generation;
    const { redis, keys, hostId } = this.opts;
    if (watch) {
      let armed: { released: Promise<void> } | null = null;
      try {
        armed = await watch.arm();
      } catch (err) {
        // A wake while arming closed the watch's session under it: not a failure.
        if (generation === this.generation && this.state === "entering") {
          this.opts.log.warn("cannot watch the held runs' owners; staying awake", errorFields(err));
        }
      }
      if (armed === null) {
        // No owner holds the lock (or the watch failed): the held runs are work, as before.
        if (generation === this.generation && this.state === "entering") this.state = "awake";
        this.opts.activity.noteWork();
        return;
      }
      // Settled while registering or asleep: only this sleep's to wake (a later one armed its own).
      armed.released.then(
        // noteWork as well: a wake while still registering does not call it, and the host must
        // not stay quiet over runs whose owner is gone.
        () => {
          if (generation !== this.generation) return;
          this.wake("released");
          this.opts.activity.noteWork();
        },
        (err: unknown) => {
          if (generation !== this.generation || this.state === "awake") return;
          this.opts.log.warn("the held-run watch failed; awake", errorFields(err));
          this.wake("watch failed");
          this.opts.activity.noteWork();
        },
      );
    }
    try {
      await this.opts.beforeSleep?.(until);
      await redis.eval(
        REGISTER_SLEEPER,
        [keys.sleepers(), keys.wake(hostId), keys.heldSleepers()],
        [String(score), hostId, watch ? "1" : "0"],
      );
    } catch (err) {
      if (generation === this.generation && this.state === "entering") {
        this.state = "awake";
        watch?.disarm();
        // A held look left the host quiet: without the sleep the held runs are work again.
        if (watch) this.opts.activity.noteWork();
      }
      this.opts.log.warn("cannot prepare or register the sleep; staying awake on the idle look", errorFields(err));
      return;
    }
    // A wake and a later enter() came while this one registered: that one owns the state now (its
    // own registration overwrote this one's score).
    if (generation !== this.generation) return;
    // Work announced meanwhile (a NOTIFY on the still open LISTEN connection), or the held runs'
    // owners gone, set us awake.
    if (this.state !== "entering" || !this.opts.activity.idle || this.stopped) {
      if (this.state === "entering") this.state = "awake";
      watch?.disarm();
      this.unregister(score);
      return;
    }
    this.registered = score;
    this.state = "asleep";
    this.sleptAt = Date.now();
    this.opts.activity.setAsleep(true);
    this.opts.onChange?.(true);
    this.opts.log.info("asleep: no Postgres statement until woken or due", {
      sleep_ms: sleepMs,
      due_in_ms: nextDueInMs,
      held_runs_watched: watch !== null,
    });
    this.opts.listener?.pause();
    const abort = new AbortController();
    this.abort = abort;
    this.loop = this.sleep(until, abort.signal);
  }

  /** Awake now (idempotent): loops hurried by the caller's noteWork, or by this one. */
  wake(reason: WakeReason): void {
    const was = this.state;
    if (was === "awake") return;
    this.state = "awake";
    this.abort?.abort();
    this.abort = null;
    this.opts.heldWatch?.disarm();
    if (was !== "asleep") return;
    this.opts.activity.setAsleep(false);
    this.opts.onChange?.(false);
    // A poke emptied the sleepers already; any other wake leaves our registration behind.
    if (reason !== "poked") this.unregister(this.registered);
    if (reason === "stop") return;
    this.opts.log.info("awake", { reason, slept_ms: Date.now() - this.sleptAt });
    this.opts.listener?.resume();
    this.opts.activity.noteWork();
    this.opts.onAwake?.(reason);
  }

  private async sleep(until: number, signal: AbortSignal): Promise<void> {
    while (this.state === "asleep" && !signal.aborted) {
      const left = until - Date.now();
      if (left <= 0) return this.wake("deadline");
      let poked: boolean;
      try {
        poked = await this.blpop(Math.min(this.opts.wakePollMs, left), signal);
      } catch (err) {
        if (signal.aborted) return;
        this.opts.log.warn("the Redis wake-up wait failed; awake", errorFields(err));
        return this.wake("wait failed");
      }
      if (poked && !signal.aborted) return this.wake("poked");
    }
  }

  /** One BLPOP on this host's wake list; true when an entry was popped. */
  private async blpop(waitMs: number, signal: AbortSignal): Promise<boolean> {
    const { url, token } = this.opts.rest;
    const res = await (this.opts.fetch ?? fetch)(url, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(["BLPOP", this.opts.keys.wake(this.opts.hostId), (waitMs / 1000).toFixed(3)]),
      signal: AbortSignal.any([signal, AbortSignal.timeout(waitMs + 15_000)]),
    });
    const body = (await res.json()) as { result?: unknown; error?: string };
    if (!res.ok || body.error) throw new Error(`BLPOP answered ${res.status}: ${body.error ?? "no result"}`);
    return body.result !== null && body.result !== undefined;
  }

  /**
   * Fire and forget: a registration left behind only costs its owner one spurious wake-up (and
   * the cron one skipped pass). Compare-and-delete on the score (UNREGISTER_SLEEPER).
   */
  private unregister(score: number): void {
    this.opts.redis
      .eval(
        UNREGISTER_SLEEPER,
        [this.opts.keys.sleepers(), this.opts.keys.heldSleepers()],
        [String(score), this.opts.hostId],
      )
      .catch((err: unknown) => this.opts.log.warn("sleeper registration not removed", errorFields(err)));
  }
}

/**
 * The one shape of every periodic host loop (heartbeats, lease renewal, the cancel watch, the
 * reaper, the sandbox janitor): run `fn` every `everyMs`, jittered so many hosts do not align,
 * never two runs at once, and `stop()` resolves only once the run in flight has ended, so the
 * host can close the Postgres pool right after without a loop still writing through it.
 *
 * Fixed delay (the default) waits the full period after a run ends. Fixed rate subtracts the
 * run's own duration from the wait: for a loop whose period is a latency bound (how long a
 * cancel waits to be seen), a 40 ms check under load must not stretch 200 ms to 240 ms.
 *
 * A loop with an `idle` period waits that long instead after a run during which `idle.when()`
 * held (at its start and its end: the fleet is idle, lifecycle/activity.ts); `hurry()` cuts such a
 * wait to one busy period when work appears.
 *
 * A host service that is one such loop, with nothing else to start or stop, extends
 * `PeriodicService` below rather than wiring the loop, its idle period and its hurry itself.
 */
import { jitter } from "../../src/domain/backoff";
import type { FleetActivity } from "./activity";
import type { Service } from "./service";

export interface PeriodicOptions {
  /** For the host's start/stop log and the error log line. */
  name: string;
  everyMs: number;
  /** Spread of the jitter around `everyMs` (0.1 = ±10%). */
  spread: number;
  /** Subtract the run's duration from the next wait (see above). Default false: fixed delay. */
  fixedRate?: boolean;
  /** Delay of the first run; default one jittered period. */
  firstDelayMs?: number;
  /** A run that threw (the loops catch their own errors; this is the backstop). */
  onError?: (err: unknown) => void;
  /** The period while `when()` holds at the end of a run (jittered like `everyMs`). */
  idle?: { everyMs: number; when: () => boolean };
}

export class PeriodicTask implements Service {
  readonly name: string;
  private timer: NodeJS.Timeout | undefined;
  private dueAt = 0;
  private inFlight: Promise<void> | null = null;
  private active = false;

  constructor(
    private readonly opts: PeriodicOptions,
    private readonly fn: () => Promise<unknown>,
  ) {
    this.name = opts.name;
  }

  /** True between start() and stop(). */
  get running(): boolean {
    return this.active;
  }

  start(): void {
    if (this.active) return;
    this.active = true;
    this.schedule(this.opts.firstDelayMs ?? jitter(this.opts.everyMs, this.opts.spread));
  }

  /** No new run starts after this is called; resolves once the one in flight (if any) ended. */
  async stop(): Promise<void> {
    this.active = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.inFlight) await this.inFlight;
  }

  /**
   * One extra run outside the schedule (an event said "check now"), after the run in flight and
   * never alongside it; skipped once stopped. stop() awaits it like a scheduled run.
   */
  async runNow(fn: () => Promise<unknown> = this.fn): Promise<void> {
    while (this.inFlight) await this.inFlight;
    if (!this.active) return;
    await this.track(fn);
  }

  /**
   * Work appeared: a wait longer than one busy period (an idle one) is cut to one busy period
   * from now. A shorter wait is left alone, so a burst of calls never runs the loop more often.
   */
  hurry(): void {
    if (!this.active || this.timer === undefined) return;
    const busy = jitter(this.opts.everyMs, this.opts.spread);
    if (this.dueAt - Date.now() <= busy) return;
    clearTimeout(this.timer);
    this.schedule(busy);
  }

  private schedule(ms: number): void {
    this.dueAt = Date.now() + ms;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.tick();
    }, ms);
  }

  private async tick(): Promise<void> {
    // An extra run (runNow) may be in flight when the timer fires: wait for it, never overlap.
    while (this.inFlight) await this.inFlight;
    if (!this.active) return;
    const started = Date.now();
    // Idle only if it held when the run began too: a run that began busy may have seen work the
    // fleet finished meanwhile (a sandbox whose run was still going), and the run after it acts on it.
    const idleAtStart = this.opts.idle?.when() === true;
    await this.track(this.fn);
    if (!this.active) return;
    const idle = idleAtStart && this.opts.idle?.when() ? this.opts.idle : null;
    const period = jitter(idle ? idle.everyMs : this.opts.everyMs, this.opts.spread);
    this.schedule(this.opts.fixedRate ? Math.max(0, period - (Date.now() - started)) : period);
  }

  private track(fn: () => Promise<unknown>): Promise<void> {
    const run = (async () => {
      try {
        await fn();
      } catch (err) {
        this.opts.onError?.(err);
      }
    })();
    const tracked = run.finally(() => {
      if (this.inFlight === tracked) this.inFlight = null;
    });
    this.inFlight = tracked;
    return tracked;
  }
}

export interface PeriodicServiceOptions extends Omit<PeriodicOptions, "idle"> {
  /**
   * The fleet's activity: while it is idle the loop waits HOST_IDLE_MS (`activity.idleMs`) between
   * runs instead of `everyMs`, and work appearing hurries it. Without it every wait is `everyMs`.
   */
  activity?: FleetActivity;
  /** While idle, wait at least `everyMs` too: max(everyMs, HOST_IDLE_MS). Default: HOST_IDLE_MS alone. */
  idleAtLeastBusy?: boolean;
}

/**
 * A service that is one periodic loop: its start and stop are the loop's, and it follows the
 * fleet's activity (`PeriodicServiceOptions.activity`). `run` is the subclass's one pass.
 */
export abstract class PeriodicService implements Service {
  readonly name: string;
  private readonly loop: PeriodicTask;

  constructor({ activity, idleAtLeastBusy, ...opts }: PeriodicServiceOptions, run: () => Promise<unknown>) {
    this.name = opts.name;
    const idle = activity && {
      everyMs: idleAtLeastBusy ? Math.max(opts.everyMs, activity.idleMs) : activity.idleMs,
      when: () => activity.idle,
    };
    this.loop = new PeriodicTask({ ...opts, idle }, run);
    activity?.onWork(() => this.loop.hurry());
  }

  start(): void {
    this.loop.start();
  }

  /** No run starts after this; resolves once the one in flight (if any) ended. */
  stop(): Promise<void> {
    return this.loop.stop();
  }
}

/**
 * A host loop that decides its own next wake-up: each run returns how long until it has work
 * again (null: it does not know), and the loop sleeps that long, but never longer than its cap:
 * `busyMs`, or `idle.everyMs` while the fleet is idle (lifecycle/activity.ts: LISTEN up, nothing
 * anywhere). `wake()` runs it now (a NOTIFY said so), coalescing wakes that arrive while one is
 * pending. Never two runs at once; `stop()` resolves once the run in flight has ended.
 * The schedule ticker and the webhook sender use it: both know when their next row comes due,
 * and both are woken by a NOTIFY when a new one appears, so an idle fleet costs a statement per
 * idle period, not one per busy period.
 */
import type { Service } from "./service";

export interface TimedLoopOptions {
  name: string;
  busyMs: number;
  idle?: { everyMs: number; when: () => boolean };
  onError?: (err: unknown) => void;
}

export class TimedLoop implements Service {
  readonly name: string;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | null = null;
  private active = false;
  private again = false;

  constructor(
    private readonly opts: TimedLoopOptions,
    private readonly fn: () => Promise<number | null>,
  ) {
    this.name = opts.name;
  }

  start(): void {
    if (this.active) return;
    this.active = true;
    this.wake();
  }

  async stop(): Promise<void> {
    this.active = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.inFlight) await this.inFlight;
  }

  /** Run now, or right after the run in flight. */
  wake(): void {
    if (!this.active) return;
    if (this.inFlight) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.timer = undefined;
    // The next run starts only once this one is cleared: a wake during it is one more run after it.
    this.inFlight = this.run().finally(() => {
      this.inFlight = null;
      if (this.again) {
        this.again = false;
        this.wake();
      }
    });
  }

  private async run(): Promise<void> {
    let nextInMs: number | null = null;
    try {
      nextInMs = await this.fn();
    } catch (err) {
      this.opts.onError?.(err);
    }
    // Stopped, or woken meanwhile (the run after this one is started by wake's finally).
    if (!this.active || this.again) return;
    const cap = this.opts.idle?.when() ? this.opts.idle.everyMs : this.opts.busyMs;
    const wait = Math.max(0, Math.min(nextInMs ?? cap, cap));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.wake();
    }, wait);
  }
}

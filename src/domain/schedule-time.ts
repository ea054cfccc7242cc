/**
 * A schedule's clock (docs/api.md "Schedules"): its cron (5 fields, or 6 with seconds first) in
 * an IANA timezone, parsed by croner (a maintained parser with DST handling: a wall time the
 * spring-forward skips fires at the first instant after the gap, a fixed time the fall-back
 * repeats fires once, and an hourly or finer cron fires at every real instant). The gateway
 * checks a cron and timezone once (a 400 naming the bad one); whoever fires a tick (host
 * schedulers, the Worker's cron) computes the tick after it here, so the two agree.
 */
import { Cron } from "croner";
import type { CatchUp } from "../contracts/schedule";

/**
 * `catch_up: "none"`: a tick fired later than this after its time counts as missed and is
 * skipped. The Worker's cron (every minute) is the slowest firer: with no host up it picks a
 * tick up at most ~60 s late, so two minutes keeps those ticks while dropping ticks owed from an
 * outage.
 */
export const MISSED_TICK_AFTER_MS = 120_000;

/** Why a timezone is not one, or null when Intl knows it as an IANA zone. */
export function timezoneProblem(timezone: string): string | null {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: timezone });
    return null;
  } catch {
    return `"${timezone}" is not an IANA timezone (e.g. "Europe/Berlin", "UTC")`;
  }
}

function parse(cron: string, timezone: string): Cron {
  return new Cron(cron, { timezone, paused: true, mode: "5-or-6-parts" });
}

/** Why a cron is not one we run (field count, a bad field), or null. The timezone must be valid. */
export function cronProblem(cron: string, timezone: string): string | null {
  const fields = cron.trim().split(/\s+/).length;
  if (fields !== 5 && fields !== 6) {
    return `"${cron}" has ${fields} fields; give 5 (minute hour day month weekday) or 6 (second first)`;
  }
  try {
    const c = parse(cron, timezone);
    if (c.nextRun(new Date()) === null) return `"${cron}" never fires`;
    return null;
  } catch (err) {
    return `"${cron}" is not a valid cron: ${err instanceof Error ? err.message.replace(/^CronPattern: /, "") : err}`;
  }
}

/** The first tick strictly after `after`, or null when the cron never fires again. */
export function nextTick(cron: string, timezone: string, after: Date): Date | null {
  return parse(cron, timezone).nextRun(after);
}

/**
 * The tick to fire when the owed tick `due` has come (`due <= now`), and the tick owed after it.
 * `latest`: one run for however many ticks passed, at the latest one not after now. `none`: the
 * owed tick runs unless it is older than MISSED_TICK_AFTER_MS (then nothing runs and the
 * schedule moves on to its next tick after now).
 */
export function tickToFire(
  s: { cron: string; timezone: string; catchUp: CatchUp },
  due: Date,
  now: Date,
): { fire: Date | null; next: Date | null } {
  const c = parse(s.cron, s.timezone);
  const after = c.nextRun(due);
  // The owed tick is the only one passed: it runs, whichever the mode.
  if (after === null || after.getTime() > now.getTime()) {
    const late = now.getTime() - due.getTime() > MISSED_TICK_AFTER_MS;
    return { fire: s.catchUp === "none" && late ? null : due, next: after };
  }
  const next = c.nextRun(now);
  if (s.catchUp === "none") return { fire: null, next };
  // previousRuns works at whole seconds before its reference: ask from a second past now and keep
  // the latest tick not after now (a tick exactly at now included).
  const latest = c.previousRuns(3, new Date(now.getTime() + 1000)).find((t) => t.getTime() <= now.getTime());
  return { fire: latest ?? due, next };
}

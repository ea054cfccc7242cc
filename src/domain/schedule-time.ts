/**
 * A schedule's clock (docs/api.md "Schedules"): its cron (5 fields, or 6 with seconds first) in
 * an IANA timezone, parsed by croner (a maintained parser with DST handling: a wall time the
 * spring-forward skips fires at the first instant after the gap, a fixed time the fall-back
 * repeats fires once, and an hourly or finer cron fires at every real instant). The gateway
 * checks a cron and timezone once (a 400 naming the bad one); whoever fires a tick (host
 * schedulers, the Worker's cron) checks the timezone again by the same rule and computes the tick
 * after it here, so the two agree.
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

/**
 * A tick that failed to fire (its clock unreadable, its agent read or its statement failed) is
 * tried again after a delay that doubles with each failure in a row, from `firstMs` up to
 * `maxMs`, instead of at every pass: a row that cannot fire costs one statement per delay and
 * never holds a place in the due batch meanwhile (src/db/schedules-repo.ts).
 */
export const SCHEDULE_RETRY = { firstMs: 2_000, maxMs: 900_000 } as const;

/** The delay before the next try after `failures` (≥ 1) failures in a row. */
export function retryDelayMs(failures: number): number {
  const doublings = Math.min(Math.max(failures, 1) - 1, 30);
  return Math.min(SCHEDULE_RETRY.maxMs, SCHEDULE_RETRY.firstMs * 2 ** doublings);
}

/**
 * How an IANA zone name is spelled: `/`-separated parts of ASCII letters, digits, `_`, `-` and
 * `+`, each part starting with a letter ("Europe/Berlin", "America/Port-au-Prince", "Etc/GMT+5",
 * "UTC"). It is checked before Intl because what Intl takes as a zone depends on the engine and
 * its ICU, and the gateway (workerd) and the hosts (Node 20 or 22) run different ones: workerd
 * and Node 22 take a UTC offset ("+05:30", "-00:00", "+0530") as a zone, Node 20 refuses it, so
 * a schedule the gateway stored could never fire on a host. A rule written here gives every
 * runtime the same verdict.
 */
const IANA_NAME = /^[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z][A-Za-z0-9_+-]*)*$/;

/**
 * Names spelled like zones that some ICU knows but that are no zone a schedule can mean, or not
 * in the IANA database any more: tzdb's `Factory` (its placeholder for "local time unknown",
 * which workerd takes and Node refuses), ICU's `Etc/Unknown`, and ICU's leftovers of names tzdb
 * removed (`SystemV/…`, `US/Pacific-New`, `Canada/East-Saskatchewan`), which an ICU update may
 * drop on one runtime before the other. Intl matches zone names case-insensitively, so this does.
 */
const NOT_A_ZONE = /^(?:factory|etc\/unknown|systemv\/.*|us\/pacific-new|canada\/east-saskatchewan)$/i;

/**
 * Why a timezone is not one a schedule may use, or null. The one check of a zone, the same
 * wherever it runs: the gateway's 400 (workers/routes/schedules.ts) and every firer before it
 * computes a tick (`tickToFire`), so a row the rule refuses (one stored before the rule) fails
 * the same way on a host and in the Worker's cron. IANA names only, by the rule above and then
 * by the runtime's Intl (which knows the names the rule lets through: test/unit and test/workers
 * check the same list on Node and in workerd). `Etc/GMT+5` and the like are IANA names and are
 * taken, with POSIX's sign: `Etc/GMT+5` is five hours behind UTC (UTC−05:00).
 */
export function timezoneProblem(timezone: string): string | null {
  const notOne = `"${timezone}" is not an IANA timezone (e.g. "Europe/Berlin", "UTC")`;
  if (!IANA_NAME.test(timezone)) {
    return /^[+\-\u2212\d]/.test(timezone) ? `${notOne}; a UTC offset is not a zone name` : notOne;
  }
  if (NOT_A_ZONE.test(timezone)) return notOne;
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: timezone });
    return null;
  } catch {
    return notOne;
  }
}

/**
 * A schedule's clock cannot be read: its timezone is one `timezoneProblem` refuses, or its cron
 * does not parse. Only a row stored before a check existed can get here (the gateway checks
 * both); its message (prefixed by the field, like the gateway's 400) is safe to show the tenant
 * as the schedule's `last_error`.
 */
export class ScheduleClockError extends Error {
  override readonly name = "ScheduleClockError";
}

/** The cron on its zone's clock; a zone `timezoneProblem` refuses is never read, whatever Intl says. */
function parse(cron: string, timezone: string): Cron {
  const tz = timezoneProblem(timezone);
  if (tz !== null) throw new ScheduleClockError(`timezone: ${tz}`);
  return new Cron(cron, { timezone, paused: true, mode: "5-or-6-parts" });
}

/** As parse, for a firer: a cron that does not parse is a ScheduleClockError too. */
function parseStored(cron: string, timezone: string): Cron {
  try {
    return parse(cron, timezone);
  } catch (err) {
    if (err instanceof ScheduleClockError) throw err;
    throw new ScheduleClockError(`cron: ${cronProblem(cron, timezone) ?? String(err)}`);
  }
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
 * schedule moves on to its next tick after now). Throws ScheduleClockError when the schedule's
 * timezone or cron cannot be read (a row stored before the checks).
 */
export function tickToFire(
  s: { cron: string; timezone: string; catchUp: CatchUp },
  due: Date,
  now: Date,
): { fire: Date | null; next: Date | null } {
  const c = parseStored(s.cron, s.timezone);
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

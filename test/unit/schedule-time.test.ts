/**
 * A schedule's clock (src/domain/schedule-time.ts): the checks the gateway answers 400 with, the
 * next tick in an IANA timezone across both daylight-saving changes of Europe/Berlin in 2026
 * (spring forward 2026-03-29 02:00 CET → 03:00 CEST, fall back 2026-10-25 03:00 CEST → 02:00 CET),
 * and what a firer does about ticks passed while nothing fired (catch_up).
 */
import { describe, expect, it } from "vitest";
import {
  cronProblem,
  MISSED_TICK_AFTER_MS,
  nextTick,
  retryDelayMs,
  SCHEDULE_RETRY,
  ScheduleClockError,
  tickToFire,
  timezoneProblem,
} from "../../src/domain/schedule-time";
import { TIMEZONE_VERDICTS } from "../fixtures/timezones";

/** Every tick in (from, to], by repeated nextTick: what a firer walks through. */
function ticks(cron: string, tz: string, from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = nextTick(cron, tz, new Date(from)); t && t <= new Date(to); t = nextTick(cron, tz, t)) {
    out.push(t.toISOString());
  }
  return out;
}

/** The wall-clock time in Berlin of an instant, as "HH:MM". */
const berlin = (iso: string) =>
  new Intl.DateTimeFormat("en-GB", { timeZone: "Europe/Berlin", hour: "2-digit", minute: "2-digit" }).format(
    new Date(iso),
  );

describe("cron and timezone checks", () => {
  it("names what is wrong", () => {
    expect(cronProblem("* * * *", "UTC")).toMatch(/4 fields; give 5/);
    expect(cronProblem("0 0 0 * * * 2026", "UTC")).toMatch(/7 fields/);
    expect(cronProblem("61 * * * *", "UTC")).toMatch(/minute/);
    expect(cronProblem("*/3 * * * * *", "UTC")).toBeNull();
    expect(cronProblem("0 9 * * 1-5", "Europe/Berlin")).toBeNull();
    expect(timezoneProblem("Mars/Olympus")).toMatch(/"Mars\/Olympus" is not an IANA timezone/);
    expect(timezoneProblem("Europe/Berlin")).toBeNull();
  });

  it("gives every zone of the shared list the verdict workerd gives (test/workers/schedule-timezones.test.ts)", () => {
    const verdicts = TIMEZONE_VERDICTS.map(([zone]) => [zone, timezoneProblem(zone) === null] as const);
    expect(verdicts).toEqual(TIMEZONE_VERDICTS);
    expect(timezoneProblem("+05:30")).toMatch(/"\+05:30" is not an IANA timezone .*; a UTC offset is not a zone name/);
    expect(timezoneProblem("Factory")).toMatch(/"Factory" is not an IANA timezone/);
  });

  it("Etc/GMT+5 is taken with POSIX's sign: five hours behind UTC", () => {
    expect(nextTick("0 9 * * *", "Etc/GMT+5", new Date("2026-01-01T00:00:00Z"))).toEqual(
      new Date("2026-01-01T14:00:00Z"),
    );
  });

  it("a firer never reads a clock in a zone the check refuses, whatever its Intl takes", () => {
    // A row stored before the check: the firer fails it with the check's words (its last_error).
    for (const timezone of ["+05:30", "-00:00", "+0530", "Factory"]) {
      const fire = () => tickToFire({ cron: "* * * * * *", timezone, catchUp: "latest" }, new Date(), new Date());
      expect(fire).toThrow(ScheduleClockError);
      expect(fire).toThrow(/^timezone: ".*" is not an IANA timezone/);
    }
    expect(() =>
      tickToFire({ cron: "61 * * * *", timezone: "UTC", catchUp: "latest" }, new Date(), new Date()),
    ).toThrow(/^cron: "61 \* \* \* \*" is not a valid cron/);
  });

  it("a tick that failed to fire waits longer after each failure in a row, up to the cap", () => {
    expect([1, 2, 3, 4].map(retryDelayMs)).toEqual([2_000, 4_000, 8_000, 16_000]);
    expect(retryDelayMs(9)).toBe(512_000);
    expect(retryDelayMs(10)).toBe(SCHEDULE_RETRY.maxMs);
    expect(retryDelayMs(1_000)).toBe(SCHEDULE_RETRY.maxMs);
  });

  it("a 6-field cron has seconds first", () => {
    expect(ticks("*/3 * * * * *", "UTC", "2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z")).toEqual([
      "2026-01-01T00:00:03.000Z",
      "2026-01-01T00:00:06.000Z",
      "2026-01-01T00:00:09.000Z",
    ]);
  });
});

describe("Europe/Berlin across daylight-saving changes", () => {
  it("a daily 09:00 stays 09:00 on the wall clock: 08:00Z in winter, 07:00Z in summer", () => {
    const t = ticks("0 9 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", "2026-03-31T12:00:00Z");
    expect(t).toEqual([
      "2026-03-28T08:00:00.000Z",
      "2026-03-29T07:00:00.000Z",
      "2026-03-30T07:00:00.000Z",
      "2026-03-31T07:00:00.000Z",
    ]);
    expect(t.map(berlin)).toEqual(["09:00", "09:00", "09:00", "09:00"]);
  });

  it("02:30, which the spring-forward skips, fires once that day, at the first instant after the gap", () => {
    const t = ticks("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z", "2026-03-30T12:00:00Z");
    expect(t).toHaveLength(3);
    expect(t[1]).toBe("2026-03-29T01:00:00.000Z");
    expect(berlin(t[1] as string)).toBe("03:00");
    expect([t[0], t[2]].map((x) => berlin(x as string))).toEqual(["02:30", "02:30"]);
  });

  it("02:30, which the fall-back repeats, fires once that day", () => {
    const t = ticks("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", "2026-10-25T12:00:00Z");
    expect(t).toHaveLength(1);
    expect(berlin(t[0] as string)).toBe("02:30");
  });

  it("an hourly cron fires at every real hour through the fall-back (25 ticks that day), one hour apart", () => {
    // 2026-10-25 in Berlin runs from 2026-10-24T22:00Z (CEST) to 2026-10-25T23:00Z (CET): 25 hours.
    const t = ticks("0 * * * *", "Europe/Berlin", "2026-10-24T21:59:59Z", "2026-10-25T22:59:59Z");
    expect(t).toHaveLength(25);
    const gaps = t.slice(1).map((x, i) => Date.parse(x) - Date.parse(t[i] as string));
    expect(new Set(gaps)).toEqual(new Set([3_600_000]));
  });
});

describe("catch_up", () => {
  const every3s = { cron: "*/3 * * * * *", timezone: "UTC" };
  const due = new Date("2026-01-01T00:00:03Z");

  it("an owed tick that is the only one passed fires whatever the mode", () => {
    const now = new Date("2026-01-01T00:00:04Z");
    for (const catchUp of ["latest", "none"] as const) {
      expect(tickToFire({ ...every3s, catchUp }, due, now)).toEqual({
        fire: due,
        next: new Date("2026-01-01T00:00:06Z"),
      });
    }
  });

  it("latest: many ticks passed make one run, for the latest; none: no run", () => {
    const now = new Date("2026-01-01T00:01:00.500Z");
    expect(tickToFire({ ...every3s, catchUp: "latest" }, due, now)).toEqual({
      fire: new Date("2026-01-01T00:01:00Z"),
      next: new Date("2026-01-01T00:01:03Z"),
    });
    expect(tickToFire({ ...every3s, catchUp: "none" }, due, now)).toEqual({
      fire: null,
      next: new Date("2026-01-01T00:01:03Z"),
    });
  });

  it("a tick exactly at now is the latest", () => {
    const now = new Date("2026-01-01T00:00:09Z");
    expect(tickToFire({ ...every3s, catchUp: "latest" }, due, now).fire).toEqual(now);
  });

  it("none: the one owed tick, fired later than MISSED_TICK_AFTER_MS, counts as missed", () => {
    const hourly = { cron: "0 * * * *", timezone: "UTC" };
    const at = new Date("2026-01-01T01:00:00Z");
    const late = new Date(at.getTime() + MISSED_TICK_AFTER_MS + 1);
    const inTime = new Date(at.getTime() + MISSED_TICK_AFTER_MS - 1);
    expect(tickToFire({ ...hourly, catchUp: "none" }, at, late).fire).toBeNull();
    expect(tickToFire({ ...hourly, catchUp: "none" }, at, inTime).fire).toEqual(at);
    expect(tickToFire({ ...hourly, catchUp: "latest" }, at, late).fire).toEqual(at);
  });
});

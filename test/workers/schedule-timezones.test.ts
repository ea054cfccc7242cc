/**
 * The gateway's verdict on a schedule's timezone, in workerd (its V8 and ICU): the same as the
 * hosts' on Node for every zone of the shared list (test/unit/schedule-time.test.ts runs it
 * there), so a zone the gateway stores is one every firer can read, and a row one refuses the
 * other refuses too.
 */
import { describe, expect, it } from "vitest";
import { timezoneProblem } from "../../src/domain/schedule-time";
import { TIMEZONE_VERDICTS } from "../fixtures/timezones";

describe("timezoneProblem in workerd", () => {
  it("gives every zone of the shared list the verdict Node gives", () => {
    const verdicts = TIMEZONE_VERDICTS.map(([zone]) => [zone, timezoneProblem(zone) === null] as const);
    expect(verdicts).toEqual(TIMEZONE_VERDICTS);
  });
});

/**
 * Scale to zero, on real processes (tools/lib/scale-to-zero.ts): two hosts idle after a job
 * go to sleep; every other session on their database is terminated (what a Neon suspend does);
 * then for the window Postgres sees no statement, no transaction and no new session from them,
 * Redis at most one command per host per wake-poll period (HOST_WAKE_POLL_MS, shortened here as
 * the window is: `npm run bench:scale-to-zero` runs the full 5 minutes at the default 60 s), and a
 * job submitted the way the gateway submits starts within 1 s.
 */
import { describe, expect, it } from "vitest";
import { runScaleToZero } from "../../tools/lib/scale-to-zero";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");
const WINDOW_MS = Number(process.env.SCALE_TO_ZERO_WINDOW_MS ?? 20_000);
const WAKE_POLL_MS = 5_000;
const HOSTS = 2;

describe.skipIf(!canRun)("a sleeping fleet", () => {
  it("sends Postgres nothing, opens no session, polls Redis at most once per period, and wakes within 1 s", async () => {
    const r = await runScaleToZero({
      hosts: HOSTS,
      windowMs: WINDOW_MS,
      hostEnv: { HOST_WAKE_POLL_MS: String(WAKE_POLL_MS) },
    });
    const detail = JSON.stringify(r);
    console.log(`scale to zero: ${detail}`);
    // The hosts' kept pool connections were there to terminate (else the test proves nothing about reconnects).
    expect(r.terminated, detail).toBeGreaterThanOrEqual(HOSTS);
    expect(r.statements, detail).toBe(0);
    expect(r.transactions, detail).toBe(0);
    expect(r.sessions, detail).toBe(0);
    expect(r.liveSessions, detail).toBe(0);
    // One BLPOP per host per period; one more each when a wait straddles the window's edge.
    expect(r.redisCommands, detail).toBeLessThanOrEqual(HOSTS * (Math.floor(r.windowS / (WAKE_POLL_MS / 1000)) + 1));
    expect(
      Object.keys(r.redisByCommand).filter((c) => c !== "blpop"),
      detail,
    ).toEqual([]);
    expect(r.wakeMs, detail).toBeLessThan(1000);
    // A terminated connection is news, not a failure: no warn or error line.
    expect(r.hostProblems, detail).toEqual([]);
  }, 240_000);
});

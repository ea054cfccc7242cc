/**
 * The load tool's measuring parts on their own: VUs dealt over client processes, the breakdown's
 * preparation shares, and the /proc CPU sampler against CPU this process provably used.
 */
import { describe, expect, it } from "vitest";
import { stepBreakdown } from "./breakdown";
import { autoClientProcs, splitVus } from "./clients";
import { ProcCpuSampler } from "./proc-cpu";
import { parseServerTiming } from "./server-timing";
import type { RunRecord } from "./types";

describe("client processes", () => {
  it("deals every VU exactly once, round-robin, and never makes an empty share", () => {
    expect(splitVus(5, 2)).toEqual([
      [0, 2, 4],
      [1, 3],
    ]);
    expect(splitVus(2, 4)).toEqual([[0], [1]]);
    const shares = splitVus(1000, autoClientProcs(1000));
    expect(shares).toHaveLength(4);
    expect(shares.flat().sort((a, b) => a - b)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    expect([1, 100, 299, 300, 1000, 5000].map(autoClientProcs)).toEqual([1, 1, 1, 2, 4, 8]);
  });
});

const run = (path: Partial<RunRecord["path"]>, samples: number[]): RunRecord =>
  ({
    client: { submitMs: 0 },
    path: {
      clientSetupMs: 0,
      submitToInsertMs: 0,
      insertToAnswerMs: 0,
      answerToStreamMs: 0,
      streamHeadersMs: 0,
      headersToFirstEventMs: 0,
      firstEventPathMs: null,
      terminalPathMs: null,
      finishedToReceiveMs: null,
      readBackMs: null,
      ...path,
    },
    eventPathSamples: samples,
  }) as RunRecord;

describe("breakdown", () => {
  it("gives each part its share of the summed preparation and pools every event's path", () => {
    const b = stepBreakdown([
      run({ submitToInsertMs: 300, streamHeadersMs: 100 }, [1, 2]),
      run({ submitToInsertMs: 500, headersToFirstEventMs: 100 }, [3]),
      run({ submitToInsertMs: null }, [4]), // incomplete: no share, but its events count
    ]);
    expect(b.preparationShares.slice(0, 3)).toEqual([
      { part: "submit → insert", share: 0.8 },
      { part: "stream request → head", share: 0.1 },
      { part: "head → first event", share: 0.1 },
    ]);
    expect(b.events.emitToReceive).toEqual({ n: 4, p50: 2, p95: 4, max: 4 });
    expect(b.submit.toInsert.n).toBe(2);
  });
});

describe("the gateway's Server-Timing", () => {
  it("reads each part's wait and calls, and the handler's time; no header or no app part is null", () => {
    expect(parseServerTiming('pg;dur=12;desc="3", ratelimit;dur=4;desc="1", app;dur=20')).toEqual({
      appMs: 20,
      pgMs: 12,
      pgCalls: 3,
      rateLimitMs: 4,
      doMs: 0,
    });
    expect(parseServerTiming(null)).toBeNull();
    expect(parseServerTiming('pg;dur=1;desc="1"')).toBeNull();
  });

  it("splits a submit into the gateway's time and the time outside it", () => {
    const r = run(
      { clientSetupMs: 5, submitGateway: { appMs: 40, pgMs: 30, pgCalls: 2, rateLimitMs: 3, doMs: 0 } },
      [],
    );
    r.client.submitMs = 105;
    const b = stepBreakdown([r]);
    expect(b.gateway.submitApp.p50).toBe(40);
    expect(b.gateway.submitOutside.p50).toBe(60);
    expect(b.gateway.submitPgCalls.p50).toBe(2);
    expect(b.gateway.streamApp.n).toBe(0);
  });
});

describe.skipIf(process.platform !== "linux")("CPU per part from /proc", () => {
  it("counts the CPU this process used inside the window to its part", async () => {
    const sampler = new ProcCpuSampler(() => ({
      roots: [process.pid],
      known: new Map([[process.pid, "me"]]),
      source: "test",
    }));
    const window = await sampler.startWindow(100);
    // Burn 300 ms of this process's own CPU time (not wall time: the machine may be busy).
    const start = process.cpuUsage();
    let x = 0;
    for (;;) {
      for (let i = 0; i < 1e5; i++) x += Math.sqrt(i);
      const used = process.cpuUsage(start);
      if ((used.user + used.system) / 1000 >= 300) break;
    }
    expect(x).toBeGreaterThan(0);
    const cpu = await window.stop();
    const me = cpu?.parts.find((p) => p.part === "me");
    // /proc counts 10 ms ticks: 300 ms used is at least 280 ms counted.
    expect(me?.cpuMs).toBeGreaterThanOrEqual(280);
    expect(me?.pids).toContain(process.pid);
    expect(me?.waitingCores).toBeGreaterThanOrEqual(0);
    expect(cpu?.machineBusyCores).toBeGreaterThan(0);
  });
});

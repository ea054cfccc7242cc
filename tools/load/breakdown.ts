/**
 * Per step, where a run's time went (docs/capacity.md, "Breakdown"): the submit, the stream's
 * open, the event path, as p50 / p95 / max over the step's runs, the share of the client's
 * preparation (submit → first event) each part took, and, with the CPU per process, the step's
 * bottleneck in words.
 */
import { dist } from "../lib/stats";
import type { RunPath, RunRecord, StepBottleneck, StepBreakdown, StepCpu } from "./types";

/** What the gateway does not expose, so the breakdown cannot split it (checked against the code). */
export const NOT_EXPOSED = [
  "the gateway's CPU per request: Server-Timing gives wall-clock waits (workerd's clock stands still while JavaScript runs), so the handler's time minus its waits is CPU plus waiting for the isolate's thread",
  "the event path's hops (ingest received, the job object's append, the SSE write): no timestamp of theirs is exposed; measured end to end, host emit (`ts`) → client receive, beside the hosts' outbox_backlog peak",
];

/** The parts of a run's path that are one figure in ms (not a header's several). */
type MsPart = Exclude<keyof RunPath, "submitGateway" | "streamGateway">;

const PREP_PARTS: Array<[string, MsPart]> = [
  ["client setup", "clientSetupMs"],
  ["submit → insert", "submitToInsertMs"],
  ["insert → submit answer", "insertToAnswerMs"],
  ["answer → stream request", "answerToStreamMs"],
  ["stream request → head", "streamHeadersMs"],
  ["head → first event", "headersToFirstEventMs"],
];

export function stepBreakdown(records: RunRecord[]): StepBreakdown {
  const p = (k: MsPart) => dist(records.map((r) => r.path?.[k] ?? null));
  const sums = PREP_PARTS.map(() => 0);
  for (const r of records) {
    const parts = PREP_PARTS.map(([, k]) => r.path?.[k] ?? null);
    if (parts.some((x) => x === null)) continue;
    parts.forEach((x, i) => {
      sums[i] = (sums[i] as number) + (x as number);
    });
  }
  const total = sums.reduce((a, b) => a + b, 0);
  const g = (f: (r: RunRecord) => number | null | undefined) => dist(records.map((r) => f(r) ?? null));
  const outside = (client: number | null | undefined, app: number | null | undefined) =>
    client == null || app == null ? null : Math.max(0, client - app);
  return {
    submit: {
      clientSetup: p("clientSetupMs"),
      roundTrip: dist(records.map((r) => r.client.submitMs)),
      toInsert: p("submitToInsertMs"),
      insertToAnswer: p("insertToAnswerMs"),
    },
    stream: {
      answerToRequest: p("answerToStreamMs"),
      headers: p("streamHeadersMs"),
      headersToFirstEvent: p("headersToFirstEventMs"),
    },
    gateway: {
      submitApp: g((r) => r.path?.submitGateway?.appMs),
      submitOutside: g((r) =>
        outside(
          r.client.submitMs === null || r.path?.clientSetupMs == null ? null : r.client.submitMs - r.path.clientSetupMs,
          r.path?.submitGateway?.appMs,
        ),
      ),
      submitPg: g((r) => r.path?.submitGateway?.pgMs),
      submitPgCalls: g((r) => r.path?.submitGateway?.pgCalls),
      submitRateLimit: g((r) => r.path?.submitGateway?.rateLimitMs),
      streamApp: g((r) => r.path?.streamGateway?.appMs),
      streamOutside: g((r) => outside(r.path?.streamHeadersMs, r.path?.streamGateway?.appMs)),
      streamDo: g((r) => r.path?.streamGateway?.doMs),
      streamPg: g((r) => r.path?.streamGateway?.pgMs),
      readBack: p("readBackMs"),
    },
    events: {
      emitToReceive: dist(records.flatMap((r) => r.eventPathSamples ?? [])),
      firstEvent: p("firstEventPathMs"),
      terminal: p("terminalPathMs"),
      finishedToReceive: p("finishedToReceiveMs"),
    },
    preparationShares:
      total > 0
        ? PREP_PARTS.map(([part], i) => ({
            part,
            share: Math.round(((sums[i] as number) / total) * 1000) / 1000,
          })).sort((a, b) => b.share - a.share)
        : [],
    missing: NOT_EXPOSED,
  };
}

export function stepBottleneck(b: StepBreakdown, cpu: StepCpu | null): StepBottleneck {
  const top = cpu?.parts[0];
  const starved = cpu ? [...cpu.parts].sort((x, y) => y.waitingCores - x.waitingCores)[0] : undefined;
  const prep = b.preparationShares[0];
  const machine = cpu?.machineBusyCores ?? null;
  return {
    busiest: top ? `busiest ${top.part} ${top.cores.toFixed(2)} cores` : null,
    starved: starved ? `most starved ${starved.part} (waited ${starved.waitingCores.toFixed(2)} cores)` : null,
    machine:
      cpu && machine !== null
        ? `machine ${machine.toFixed(2)} cores busy, ${cpu.totalCores.toFixed(2)} of them the stack's`
        : null,
    preparation: prep ? `${prep.part} ${Math.round(prep.share * 100)} %` : null,
  };
}

/** Shapes shared by the load generator's parts and written to results.json. */
import type { Dist } from "../lib/stats";

export type Scenario = "text" | "tool" | "cancel" | "reconnect";
export const SCENARIOS: Scenario[] = ["text", "tool", "cancel", "reconnect"];

export interface HostRef {
  id: string;
  metricsUrl: string;
}

export interface Target {
  gatewayUrl: string;
  apiKey: string;
  databaseUrl: string | null;
  redisUrl: string | null;
  hosts: () => HostRef[];
  /** Where the target came from: `.dev/stack.json`, flags, or a self-started stack. */
  source: string;
}

export interface ModelScript {
  ttftMs: number;
  tokensPerS: number;
  /** Words in the scripted reply of a text / reconnect run. */
  replyTokens: number;
}

/** One virtual user's run, as observed by the client and read back from the API. */
export interface RunRecord {
  step: number;
  vu: number;
  scenario: Scenario;
  jobId: string | null;
  conversationId: string;
  /** Strict success: the stream's causal checks AND the authoritative terminal state both hold. */
  ok: boolean;
  streamOk: boolean;
  stateOk: boolean;
  problems: string[];
  finalState: string | null;
  errorCode: string | null;
  /** Host that ran it (from run.started). */
  host: string | null;
  events: number;
  client: {
    submitMs: number | null;
    preparationMs: number | null;
    firstTokenMs: number | null;
    totalMs: number | null;
    /** cancel scenario: cancel POST sent → terminal event. */
    cancelMs: number | null;
    /** reconnect scenario: events replayed on the second connection. */
    resumedEvents: number | null;
  };
  server: {
    dispatch_latency_ms: number | null;
    preparation_latency_ms: number | null;
    model_first_output_latency_ms: number | null;
    first_output_latency_ms: number | null;
    total_latency_ms: number | null;
  } | null;
}

export interface StepResult {
  concurrency: number;
  scenario: Scenario;
  runs: number;
  strictOk: number;
  wallMs: number;
  throughputPerS: number;
  failures: Record<string, number>;
  client: { submit: Dist; preparation: Dist; firstToken: Dist; total: Dist; cancel: Dist };
  server: { dispatch: Dist; preparation: Dist; modelFirstOutput: Dist; firstOutput: Dist; total: Dist };
  hostsUsed: Record<string, number>;
  resources: import("./sampler").Peaks;
}

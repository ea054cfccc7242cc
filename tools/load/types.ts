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
  resources: Peaks;
}

export interface HostPeak {
  id: string;
  rssPeakBytes: number | null;
  runsActivePeak: number | null;
  lagSamples: number;
  lagP99UpperMs: number | null;
  lagMaxBucketMs: number | null;
  lagMaxAtLeastMs: number | null;
}

export interface Peaks {
  samples: number;
  redisClientsPeak: number | null;
  redisClientsMin: number | null;
  redisPubsubPeak: number | null;
  pgTotalPeak: number | null;
  pgActivePeak: number | null;
  containersPeak: number | null;
  networksPeak: number | null;
  rssPeakBytes: number | null;
  runsActivePeak: number | null;
  /** Worst host: upper estimate of the event-loop lag p99 from histogram bucket deltas. */
  lagP99UpperMs: number | null;
  /** Worst host: upper bound of the highest lag bucket hit during the step. */
  lagMaxBucketMs: number | null;
  lagMaxAtLeastMs: number | null;
  hosts: HostPeak[];
  /** The load generator's own event-loop delay (p99, max): a saturated client would distort latencies. */
  clientLoopP99Ms: number | null;
  clientLoopMaxMs: number | null;
  /** Peak 1-minute load average over the window, and the machine's core count. */
  loadavg1Peak: number;
  cores: number;
  /** Timeline for the report: [ms since window start, runs active (sum), redis, pg total, containers]. */
  timeline: Array<[number, number | null, number | null, number | null, number | null]>;
}

export interface ModeResult {
  mode: "pinned (simulated)" | "global claim";
  runs: number;
  strictOk: number;
  makespanMs: number;
  throughputPerS: number;
  /** Arrival → terminal event, as the user sees it (includes waiting for a slot). */
  latency: Dist;
  /** Arrival → submit (client-side gate wait; 0 for the global claim). */
  gateWait: Dist;
  /** Server dispatch (created → started). */
  dispatch: Dist;
  /** Jobs per executing host (from run.started). */
  ranOn: Record<string, number>;
  runsActivePeakByHost: Record<string, number | null>;
  resources: Peaks;
}

export interface BaselineResult {
  method: string;
  hosts: string[];
  capacityPerHost: number;
  jobs: number;
  skew: number;
  /** Jobs per receiving host (the simulated connection placement). */
  assignment: Record<string, number>;
  modes: ModeResult[];
  strictOk: boolean;
  runs: RunRecord[];
}

export interface SettleCheck {
  name: string;
  before: number | null;
  after: number | null;
  tolerance: number;
  ok: boolean;
}

export interface TargetCheck {
  scenario: Scenario;
  name: string;
  limit: string;
  measured: string;
  ok: boolean;
}

export interface LoadResults {
  tool: "ear-load";
  version: 1;
  run_id: string;
  started_at: string;
  finished_at: string;
  target: { source: string; gateway_url: string; hosts: string[] };
  config: {
    steps: number[];
    scenarios: Scenario[];
    script: ModelScript;
    run_timeout_ms: number;
    settle_ms: number;
  };
  steps: StepResult[];
  targets: TargetCheck[];
  baseline_mode: BaselineResult | null;
  settle: { ok: boolean; waited_ms: number; readyz: number | null; checks: SettleCheck[] };
  notes: string[];
  runs: RunRecord[];
}

/** Shapes shared by the load generator's parts and written to results.json. */
import type { Dist } from "../lib/stats";
import type { GatewayTiming } from "./server-timing";

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
  /** `run.recovered` events on its stream, and model turns asked again (recovered or lease lost). */
  recoveries: number;
  turnsAskedAgain: number;
  /** GETs sent again after their kept-alive connection failed before any answer (vu.ts). */
  connectionRetries: number;
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
  /**
   * Where the run's time went (ms), measured against the API's own timestamps: the machine's one
   * clock serves the client, the hosts (an event's `ts`, set when the host emits it) and Postgres
   * (the job's timing facts), so differences across them are meaningful locally.
   */
  path: RunPath;
  /** Every event's host emit (`ts`) → client receive, ms; aggregated per step, not written to results.json. */
  eventPathSamples?: number[];
  server: {
    dispatch_latency_ms: number | null;
    preparation_latency_ms: number | null;
    model_first_output_latency_ms: number | null;
    first_output_latency_ms: number | null;
    total_latency_ms: number | null;
  } | null;
}

export interface RunPath {
  /**
   * The VU's start → its submit request sent: the client's own work before it (cold code in a
   * fresh client process, a loop busy with other VUs). Part of the client's submit time.
   */
  clientSetupMs: number | null;
  /** Submit request sent → the job row's `created_at` (the gateway's work before the insert). */
  submitToInsertMs: number | null;
  /** `created_at` → the submit's answer received (the insert's own trip, what follows it, the answer). */
  insertToAnswerMs: number | null;
  /** Submit answered → the SSE request sent (the client's own gap; ~0 unless the client is slow). */
  answerToStreamMs: number | null;
  /** SSE request sent → response head received (the stream's open: auth, the tenant's stream lease, the job's object). */
  streamHeadersMs: number | null;
  /** Response head → first event received. */
  headersToFirstEventMs: number | null;
  /** The first event: host emit → client receive. */
  firstEventPathMs: number | null;
  /** The terminal event: host emit → client receive. */
  terminalPathMs: number | null;
  /** The job row's `finished_at` (terminal write) → the terminal event received. */
  finishedToReceiveMs: number | null;
  /** The read-back's first GET /v1/jobs/{id} after the stream ended: sent → answered (verification, not the user's wait). */
  readBackMs: number | null;
  /** The submit's answer's Server-Timing: the gateway's own time and its waits (null: no header). */
  submitGateway?: GatewayTiming | null;
  /** The event stream's response head's Server-Timing. */
  streamGateway?: GatewayTiming | null;
}

/** Per step, where the runs' time went: p50 / p95 / max of each part (docs/capacity.md, "Breakdown"). */
export interface StepBreakdown {
  submit: { clientSetup: Dist; roundTrip: Dist; toInsert: Dist; insertToAnswer: Dist };
  stream: { answerToRequest: Dist; headers: Dist; headersToFirstEvent: Dist };
  /**
   * Inside the gateway, from its Server-Timing headers: the handler's time (`app`), the client's
   * time outside it (`outside`: the request waiting for workerd to read it, and the answer's way
   * back), and the handler's waits on Postgres, the rate-limit check and Durable Objects.
   */
  gateway: {
    submitApp: Dist;
    submitOutside: Dist;
    submitPg: Dist;
    submitPgCalls: Dist;
    submitRateLimit: Dist;
    streamApp: Dist;
    streamOutside: Dist;
    streamDo: Dist;
    streamPg: Dist;
    /** The read-back's first GET after the stream ended (the load tool's verification). */
    readBack: Dist;
  };
  events: { emitToReceive: Dist; firstEvent: Dist; terminal: Dist; finishedToReceive: Dist };
  /** Share of the client's preparation (submit → first event) per part, summed over the step's runs. */
  preparationShares: Array<{ part: string; share: number }>;
  /** What the stack does not expose, so the breakdown cannot split it. */
  missing: string[];
}

/** CPU used during a step by one part of the stack (one or more processes), from /proc. */
export interface ProcCpu {
  /** `workerd`, `host <id>`, `postgres`, `redis`, `pg bridge`, `load parent`, `load client 1`, … */
  part: string;
  pids: number[];
  cpuMs: number;
  /** cpuMs / wall: 1.0 is one core busy for the whole step. */
  cores: number;
  /** Time its threads were runnable but waited for a CPU (schedstat run_delay), summed. */
  runQueueWaitMs: number;
  /** runQueueWaitMs / wall: how many of its threads, on average, waited for a CPU. */
  waitingCores: number;
}

export interface StepCpu {
  wallMs: number;
  samples: number;
  /** How the stack's processes were found (self-started stack, .dev/stack.json pid, or a /proc scan). */
  source: string;
  parts: ProcCpu[];
  totalCores: number;
  /** The whole machine's busy cores over the window (/proc/stat): the stack's and everything else's. */
  machineBusyCores: number | null;
}

/** One process's event-loop delay over a step (monitorEventLoopDelay, resolution 10 ms). */
export interface LoopDelay {
  proc: string;
  pid: number;
  vus: number;
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

/** The busiest part of the stack (CPU) and the largest part of preparation, in words. */
export interface StepBottleneck {
  /** The part that used the most CPU, in cores. */
  busiest: string | null;
  /** The part whose threads waited longest for a CPU, in cores. */
  starved: string | null;
  /** The machine's busy cores against the stack's: other work on a shared machine shows here. */
  machine: string | null;
  /** The largest part of the client's preparation (submit → first event). */
  preparation: string | null;
}

export interface StepResult {
  concurrency: number;
  scenario: Scenario;
  runs: number;
  strictOk: number;
  /** Runs whose stream showed a `run.recovered` (correct, but a host was lost or judged lost under load). */
  runsRecovered: number;
  /** Model turns asked again over the step's runs. */
  turnsAskedAgain: number;
  /** GETs sent again after their connection failed before any answer, over the step's runs. */
  connectionRetries: number;
  wallMs: number;
  throughputPerS: number;
  failures: Record<string, number>;
  client: { submit: Dist; preparation: Dist; firstToken: Dist; total: Dist; cancel: Dist };
  server: { dispatch: Dist; preparation: Dist; modelFirstOutput: Dist; firstOutput: Dist; total: Dist };
  hostsUsed: Record<string, number>;
  resources: Peaks;
  breakdown: StepBreakdown;
  /** Client processes the step's VUs ran in (0: inside the load process itself). */
  clientProcs: number;
  loops: LoopDelay[];
  cpu: StepCpu | null;
  bottleneck: StepBottleneck;
}

export interface HostPeak {
  id: string;
  rssPeakBytes: number | null;
  runsActivePeak: number | null;
  lagSamples: number;
  lagP99UpperMs: number | null;
  lagMaxBucketMs: number | null;
  lagMaxAtLeastMs: number | null;
  /** Peak `outbox_backlog`: events emitted and not yet acknowledged by the gateway's ingest. */
  outboxBacklogPeak: number | null;
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
  /** Peak over the window of the hosts' summed `outbox_backlog` (events not yet acknowledged by ingest). */
  outboxBacklogPeak: number | null;
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
    client_procs: number | "auto";
  };
  steps: StepResult[];
  targets: TargetCheck[];
  baseline_mode: BaselineResult | null;
  settle: { ok: boolean; waited_ms: number; readyz: number | null; checks: SettleCheck[] };
  notes: string[];
  runs: RunRecord[];
}

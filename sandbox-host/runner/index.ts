export { MAX_TURNS } from "./agent-loop";
export { MAX_DELTA_CHARS } from "./model-turn";
export type { QuotaGate } from "./quota-gate";
export { ActiveRun, type RunContext, type RunPhase } from "./run-context";
export { type RunResult, runJob } from "./run-job";
export * from "./runner";

/** Row → the public Job every job route and chat `job` frame returns (docs/api.md). Latencies come from the one timing serializer. */

import { type JobState, type JobView, tenantJobError } from "../contracts/job";
import { deriveLatency, isoOrNull } from "../domain/timing";
import { jobTraceId } from "../domain/traceparent";
import type { JobRow } from "./schema";

export function toJobView(row: JobRow): JobView {
  return {
    id: row.id,
    conversation_id: row.conversationId,
    state: row.state as JobState,
    claimed: row.owner !== null || row.executionId !== null,
    epoch: row.epoch,
    execution_id: row.executionId,
    output: row.output,
    // Hosts already store the generic message; rows written before they did keep their detail.
    error: row.error ? tenantJobError(row.error) : null,
    created_at: isoOrNull(row.createdAt) as string,
    started_at: isoOrNull(row.startedAt),
    prepared_at: isoOrNull(row.preparedAt),
    first_output_at: isoOrNull(row.firstOutputAt),
    finished_at: isoOrNull(row.finishedAt),
    latency: deriveLatency({
      created_at: row.createdAt,
      started_at: row.startedAt,
      prepared_at: row.preparedAt,
      first_output_at: row.firstOutputAt,
      finished_at: row.finishedAt,
    }),
    model: row.model,
    tools: row.tools,
    metadata: row.metadata,
    agent:
      row.agentName !== null && row.agentVersion !== null ? { name: row.agentName, version: row.agentVersion } : null,
    usage: {
      prompt_tokens: row.promptTokens,
      completion_tokens: row.completionTokens,
      model_calls: row.modelCalls,
      estimated: row.usageEstimated,
      cost_usd: row.costUsd,
      reserved_usd: Number(row.reservedUsd ?? 0),
    },
    limits: row.limits ?? null,
    budget_added_usd: Number(row.budgetAddedUsd ?? 0),
    output_json: row.outputJson ?? null,
    waiting_for: row.state === "waiting" ? (row.waitingFor ?? null) : null,
    parent_job_id: row.parentJobId,
    root_job_id: row.rootJobId,
    depth: row.depth,
    recoveries: row.recoveries,
    trace_id: jobTraceId(row.id, row.traceparent),
    schedule_id: row.scheduleId,
    scheduled_for: isoOrNull(row.scheduledFor),
    priority: row.priority,
    run_at: isoOrNull(row.runAt),
    expires_at: isoOrNull(row.expiresAt),
    concurrency_key: row.concurrencyKey,
    forked_from:
      row.forkedFromJobId !== null && row.forkedFromStep !== null
        ? { job_id: row.forkedFromJobId, step: row.forkedFromStep }
        : null,
  };
}

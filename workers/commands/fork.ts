/**
 * Fork and rerun (docs/api.md, "Steps, forks and reruns"; docs/architecture.md, "Forks"): a new
 * job of the same tenant, submitted like any other (admission: model, tools, queue, budget,
 * priority), whose journal starts as a copy of the source's steps 1..from_step. The source is
 * only read. Its input, and its agent version unless the body names another, are the fork's.
 */
import { ApiError } from "../../src/contracts/errors";
import type { ForkBody } from "../../src/contracts/fork";
import type { CreateJobBody } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import { readPrefixFacts } from "../../src/db/fork-repo";
import { type CreatedJob, type ForkOf, getJob } from "../../src/db/jobs-repo";
import type { JobRow } from "../../src/db/schema";
import { requestHash } from "../../src/domain/request-hash";
import { callDependency, type Deps } from "../deps";
import { type SubmitOptions, submitJob } from "./submit";

/** The submit body a fork of `source` runs: the source's input, its agent (or model and tools) unless `agent` names another. */
export function forkJobBody(
  source: JobRow,
  agent: string | undefined,
  idempotencyKey: string | undefined,
): CreateJobBody {
  const runs: Partial<CreateJobBody> =
    agent !== undefined
      ? { agent }
      : source.agentName !== null && source.agentVersion !== null
        ? { agent: `${source.agentName}@${source.agentVersion}` }
        : {
            ...(source.model !== null ? { model: source.model } : {}),
            tools: source.tools as CreateJobBody["tools"],
          };
  return {
    input: source.input,
    metadata: source.metadata,
    priority: source.priority,
    ...runs,
    ...(idempotencyKey !== undefined ? { idempotency_key: idempotencyKey } : {}),
  };
}

/**
 * The fork's journal beyond the copy: checks `from_step` and `replace_result` against what the
 * source has journaled (a 400 naming the field), and the rows to add after the prefix.
 */
async function planFork(db: Db, tenantId: string, source: JobRow, body: ForkBody): Promise<ForkOf> {
  const facts = await callDependency("postgres", () =>
    readPrefixFacts(db, tenantId, source.id, body.from_step ?? null),
  );
  // The row was just read for this tenant; gone since means purged in between (a 404 upstream).
  if (!facts) throw new ApiError("not_found", "job not found");
  if (body.from_step !== undefined && body.from_step > facts.steps) {
    throw new ApiError(
      "invalid_request",
      `from_step: job ${source.id} has ${facts.steps} steps so far (GET /v1/jobs/${source.id}/steps)`,
    );
  }
  const step = facts.upTo;
  const extra: ForkOf["extra"] = [];
  let replace: ForkOf["replace"] = null;
  let open = facts.open;
  const r = body.replace_result;
  if (r) {
    const content = typeof r.result === "string" ? r.result : JSON.stringify(r.result);
    if (facts.answered.has(r.call_id)) {
      replace = { callId: r.call_id, content };
    } else if (open.includes(r.call_id)) {
      extra.push({ kind: "result", payload: { call_id: r.call_id, content } });
      open = open.filter((id) => id !== r.call_id);
    } else {
      throw new ApiError(
        "invalid_request",
        `replace_result.call_id: no tool call "${r.call_id}" in steps 1..${step} of job ${source.id}`,
      );
    }
  }
  if (body.append_messages) {
    // A conversation with calls still open takes their results before any user message.
    if (open.length > 0) {
      throw new ApiError(
        "invalid_request",
        `append_messages: step ${step} leaves tool calls open (${open.join(", ")}); fork from another step or give replace_result`,
      );
    }
    for (const m of body.append_messages) {
      extra.push({ kind: "user", payload: { content: m.content, why: "input", turn: facts.turn } });
    }
  }
  return { jobId: source.id, step, replace, extra };
}

/** Fork `sourceId` (null: the tenant has no such job). `defer` as for submitJob. */
export async function forkJob(
  deps: Deps,
  tenantId: string,
  sourceId: string,
  body: ForkBody,
  opts: SubmitOptions,
  defer?: (work: Promise<unknown>) => void,
): Promise<CreatedJob | null> {
  const db = deps.db();
  const source = await callDependency("postgres", () => getJob(db, tenantId, sourceId));
  if (!source) return null;
  const fork = await planFork(db, tenantId, source, body);
  // The key is bound to the fork request (its source and body), not to the submit body it makes.
  const hash = body.idempotency_key ? await requestHash({ fork_of: source.id, ...body }) : undefined;
  return submitJob(
    deps,
    tenantId,
    forkJobBody(source, body.agent, body.idempotency_key),
    {
      ...opts,
      requestHash: hash,
      fork,
    },
    defer,
  );
}

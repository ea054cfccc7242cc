/**
 * Job admission: whether a tenant may have a new job, the one rule every path that creates a job
 * applies with the same semantics — POST /v1/jobs, a batch item, a chat message (the same submit
 * command), a schedule at create, at PATCH and again at each tick (allow-lists and budgets change
 * between them), a delegate call's child on the host, and any later path (a fork of a job) — so
 * that none of them is a way around the others:
 *
 * 1. the job's effective model is offered to the tenant: the one it names (or its agent's), or the
 *    operator's default when it names none (MODEL_REGISTRY's per-model `tenants` allow-list);
 * 2. its tools are ones a tenant may list: the built-in sandbox tools, and code tools (the
 *    operator's HOST_TOOLS, offered to every tenant alike: docs/tools.md);
 * 3. the tenant's daily budget is not spent (src/db/budget-repo.ts);
 * 4. the tenant's queued jobs are under its cap (MAX_QUEUED_JOBS_PER_TENANT).
 *
 * 1 and 2 are this file's, pure, so the gateway checks them before any database work. 3 and 4 are
 * a state of Postgres, read by `admitJob` (src/db/admission-repo.ts, the whole check for a path
 * that reads before it inserts, like a tick) or gated inside the creating statement itself
 * (`queueFitsSql` and `overBudgetSql`: createJob, createJobs, a tick's INSERT).
 *
 * A refusal is returned, not thrown: an HTTP path turns it into its 4xx (`admissionError`), a
 * delegate call into a tool error, a tick into a skip that is logged and that its caller may
 * record on the schedule.
 */
import { ApiError } from "../contracts/errors";
import { codeToolNameProblem, TOOL_NAMES } from "../contracts/tools";
import { type ModelCatalog, type ModelEntry, modelAllowedFor } from "./models";

/**
 * Why a job was not admitted. `reason` is the job/tool error code a host uses for it (a delegate
 * call's tool error, a tick's log line); `code` the API error a request gets (its status from
 * ERROR_STATUS: 400, or 429 with `retryAfterS`).
 */
export interface AdmissionRefusal {
  reason: "model_not_allowed" | "tool_not_allowed" | "budget_exceeded" | "rate_limited";
  code: "invalid_request" | "budget_exceeded" | "rate_limited";
  message: string;
  retryAfterS?: number;
}

/** What the check needs of the deployment: its models (with allow-lists) and the queued-jobs cap (0: none). */
export interface AdmissionRules {
  models: ModelCatalog;
  maxQueued: number;
}

/** What a new job will run with: its model (null or undefined: the default) and its tools. */
export interface JobPlan {
  /** One model, or an agent's list (the primary and its fallbacks: each must be offered). */
  model: string | readonly string[] | null | undefined;
  tools: readonly string[];
}

/** The entries `tenantId` may use, in the operator's order (the deployment's default first). */
export function modelsOfferedTo(models: ModelCatalog, tenantId: string): ModelEntry[] {
  return models.entries.filter((e) => modelAllowedFor(e, tenantId));
}

/**
 * Check 1. `field` names where the model came from (`model`, `agent: x@1's model`); a job naming
 * none is checked on the default, and says so. A deployment that offers no model at all leaves
 * a job naming none to the host's own model (nothing to choose from), as before the registry.
 */
export function modelRefusal(
  models: ModelCatalog,
  tenantId: string,
  model: string | readonly string[] | null | undefined,
  field = "model",
): AdmissionRefusal | null {
  if (typeof model === "object" && model !== null) {
    // An agent's fallbacks are checked like its primary: a call may go to any of them.
    for (const [i, m] of model.entries()) {
      const refused = modelRefusal(models, tenantId, m, model.length > 1 ? `${field}.${i}` : field);
      if (refused) return refused;
    }
    return null;
  }
  const omitted = model === null || model === undefined;
  const effective = omitted ? models.entries[0]?.name : model;
  if (effective === undefined) return null;
  const offered = modelsOfferedTo(models, tenantId).map((e) => e.name);
  if (offered.includes(effective)) return null;
  const where = omitted ? `${field} (omitted, so the default)` : field;
  return {
    reason: "model_not_allowed",
    code: "invalid_request",
    message:
      offered.length === 0
        ? `${where}: "${effective}" is not offered: this deployment offers no choice of model`
        : `${where}: "${effective}" is not offered; must be one of ${offered.join(", ")} (GET /v1/models)`,
  };
}

/**
 * Check 2: each tool a built-in sandbox tool or a code tool's name. Code tools have no tenant
 * scope today (docs/tools.md), so a well-formed name passes; a per-tenant tool scope goes here.
 */
export function toolsRefusal(tools: readonly string[], field = "tools"): AdmissionRefusal | null {
  const i = tools.findIndex((t) => !(TOOL_NAMES as readonly string[]).includes(t) && codeToolNameProblem(t) !== null);
  if (i < 0) return null;
  return {
    reason: "tool_not_allowed",
    code: "invalid_request",
    message: `${field}.${i}: "${tools[i]}" is not a tool this tenant may use (GET /v1/tools)`,
  };
}

/** Checks 1 and 2, for a plan; `prefix` names the plan's source (`agent: x@1's `). */
export function planRefusal(
  models: ModelCatalog,
  tenantId: string,
  plan: JobPlan,
  prefix = "",
): AdmissionRefusal | null {
  return modelRefusal(models, tenantId, plan.model, `${prefix}model`) ?? toolsRefusal(plan.tools, `${prefix}tools`);
}

/** Retry-After for a full queue: hosts drain a queue in seconds when they have slots at all. */
export const QUEUE_FULL_RETRY_AFTER_S = 5;

/** Check 4's refusal: the tenant already has `maxQueued` queued jobs. */
export function queueFullRefusal(maxQueued: number): AdmissionRefusal {
  return {
    reason: "rate_limited",
    code: "rate_limited",
    message: `this tenant already has ${maxQueued} queued jobs (the limit)`,
    retryAfterS: QUEUE_FULL_RETRY_AFTER_S,
  };
}

/** A refusal as the API answers it (400, or 429 with Retry-After). */
export function admissionError(r: AdmissionRefusal): ApiError {
  return new ApiError(r.code, r.message, r.retryAfterS === undefined ? {} : { retryAfterS: r.retryAfterS });
}

/** For a request path: throws the refusal as its API error; nothing when admitted. */
export function assertAdmitted(r: AdmissionRefusal | null): void {
  if (r) throw admissionError(r);
}

/**
 * One model turn as a careful client makes it: behind the quota gate, retried when it failed
 * before producing output (model-retry.ts decides whether and how long to wait; each retry is a
 * `model.retry` event and the turn's quota slot is given back for the wait), and each call's
 * tokens recorded the moment it ends. A call whose quota lease was lost (under load an acquire
 * or renewal can come back past the lease's deadline) is not the run's end: the slot is given
 * back, the gate waited at again and the turn asked again from its start, announced by
 * `model.turn` with reason `lease_lost` (its partial output is discarded). Bounded: at most
 * MAX_LEASE_RETRIES per turn, and those waits share one QUOTA_MAX_WAIT_MS; past either the run
 * fails `quota_lease_lost` (docs/quota.md).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { type Attributes, SpanKind } from "@opentelemetry/api";
import { AGENT_LIMITS } from "../../src/contracts/agent";
import { budgetMessage, budgetRefusal } from "../../src/db/budget-repo";
import type { FinalOutcome } from "../../src/db/ownership-repo";
import { recordModelUsage } from "../../src/db/run-repo";
import { approvalSettings } from "../../src/domain/approval";
import type { ModelEntry, ModelPricing } from "../../src/domain/models";
import { budgetKeys, isTokenBudget } from "../../src/quota/keys";
import type { BudgetDemand } from "../../src/quota/lease-store";
import { errorFields } from "../log";
import type { ModelToolCall, ModelUsage } from "../model/types";
import { inSpan, markOutcome } from "../tracing/spans";
import { retryDelayMs } from "./model-retry";
import { streamModelTurn, type TurnRequest } from "./model-turn";
import { type AdmittedTurn, acquireQuota, type BudgetExhausted, settledQuota } from "./quota-gate";
import { abortedOutcome, type Execution, failed, type RunDeps } from "./run-context";
import type { WaitOutcome } from "./waitpoint";

/**
 * Characters per token for an estimate when the provider reports no usage: OpenAI's rule of
 * thumb for English text ("~4 characters per token"). Rough by design; the row says `estimated`.
 */
export const CHARS_PER_TOKEN = 4;

/**
 * Lost leases one turn survives. The wait budget alone would not bound a loop of leases lost at
 * once (Redis flushed again and again, a host frozen over and over): each wait may be short.
 */
export const MAX_LEASE_RETRIES = 3;

/**
 * Provider failures before the first token that send a turn on to the agent's next model: a
 * refusal (429), the provider failing (5xx, a broken or unusable stream) or not answering
 * (timeout, connection). A 4xx of the request itself (`bad_response`) would fail on any model.
 */
const FALLBACK_CODES: ReadonlySet<string> = new Set(["rate_limited", "provider_error", "network_error"]);

/** The run's turn: its number, its request, and the run's answer so far (the outcome's partial output if it ends here). */
export interface ModelCallInput {
  model: ModelEntry;
  /** The agent's fallback models, in order (docs/models.md, "Fallbacks"); none: retries only. */
  fallbacks?: readonly ModelEntry[];
  turn: number;
  request: TurnRequest;
  textSoFar: string;
}

export async function callModel(
  exec: Execution,
  input: ModelCallInput,
): Promise<{ text: string; calls: ModelToolCall[] } | FinalOutcome | WaitOutcome> {
  const { deps, run } = exec;
  const { turn, textSoFar } = input;
  // The model this turn is on, and its request: a fallback moves both to the next model.
  let { model, request } = input;
  const fallbacks = [...(input.fallbacks ?? [])];
  const began = performance.now();
  // Lost leases so far and the quota wait spent on the retries after them (the shared budget).
  const lost = { retries: 0, waitedMs: 0 };
  let afterLoss: { maxWaitMs: number; retry: number } | undefined;
  const overBudget = await budgetCheck(exec);
  if (overBudget) return failed("budget_exceeded", overBudget, textSoFar);
  for (let attempt = 1; ; attempt++) {
    // Every attempt reserves its own worst case: its prompt may have grown (a retry after a lost
    // lease asks the same turn again, but the budget's spend moved meanwhile).
    const budgets = budgetDemands(exec, model, request);
    // A retry is a new lease (its own holder): the slot was given back for the wait.
    const admitted = await acquireQuota(exec, {
      model,
      turn: attempt === 1 ? turn : `${turn}.${attempt}`,
      afterLoss,
      budgets,
    });
    if ("state" in admitted) return admitted;
    if ("budgetExhausted" in admitted) return budgetOutcome(exec, admitted, { model, turn, textSoFar });
    if (afterLoss) lost.waitedMs += admitted.waitedMs;
    // Only the wait right after a loss draws on the budget (a provider retry's wait has its own).
    afterLoss = undefined;
    const result = await inSpan(
      deps.tracing.tracer,
      `chat ${model.name}`,
      { kind: SpanKind.CLIENT, attributes: modelSpanAttributes(model, request, attempt) },
      async (span) => {
        const r = await streamModelTurn(exec, { request, admitted });
        // A call that produced output (or finished) was served, and the provider counts it: so do we.
        if (r.ok || r.outputStarted) {
          const used = await recordUsage(exec, {
            model,
            request,
            text: r.text,
            calls: r.calls,
            reported: r.ok ? r.usage : undefined,
            // Counted only when a reservation was really taken (a turn without quota takes none).
            reservedUsd: admitted.lease?.budgets?.length ? reservedUsdOf(budgets) : 0,
            settle: (spent) => settleBudgets(exec, admitted, budgets, spent),
          });
          span.setAttributes({
            "gen_ai.usage.input_tokens": used.promptTokens,
            "gen_ai.usage.output_tokens": used.completionTokens,
            "ear.usage.estimated": used.estimated,
            ...(used.costUsd === null ? {} : { "ear.cost_usd": used.costUsd }),
          });
        } else {
          // Refused or failed before any output: nothing was served, the reservation goes.
          await settleBudgets(exec, admitted, budgets, { costUsd: 0, tokens: 0 });
        }
        if (r.ok) {
          span.setAttribute("gen_ai.response.finish_reasons", [
            r.finishReason ?? (r.calls.length ? "tool_calls" : "stop"),
          ]);
          markOutcome(span, exec.signal.aborted ? "aborted" : "ok");
        } else if ("leaseLost" in r) {
          markOutcome(span, "lease_lost");
        } else {
          markOutcome(span, r.outputStarted ? "failed" : "retryable", { code: r.error.code, message: r.error.message });
        }
        return r;
      },
    );
    if (result.ok) {
      countCall(deps, model, exec.signal.aborted ? "aborted" : "ok");
      return { text: result.text, calls: result.calls };
    }
    if (exec.signal.aborted) {
      countCall(deps, model, "aborted");
      return abortedOutcome(run, result.text || textSoFar);
    }
    if ("leaseLost" in result) {
      // Fail closed stays: no chunk was taken under the lost lease, and the next call has a new one.
      const budgetMs = deps.quota?.maxWaitMs ?? 0;
      lost.retries += 1;
      if (lost.retries > MAX_LEASE_RETRIES || lost.waitedMs >= budgetMs) {
        countCall(deps, model, "failed");
        return failed(
          "quota_lease_lost",
          `the model quota lease was lost ${lost.retries} times in this turn (retried ${lost.retries - 1}, waited ${Math.round(lost.waitedMs)} of ${budgetMs} ms); no model call was made without a lease`,
          textSoFar,
        );
      }
      countCall(deps, model, "retried");
      deps.log.warn("quota lease lost mid-turn; asking the turn again", { ...exec.fields, turn, retry: lost.retries });
      afterLoss = { maxWaitMs: budgetMs - lost.waitedMs, retry: lost.retries };
      // The turn starts over: a client drops the text it streamed since the last model.turn.
      exec.emit("model.turn", { turn, reason: "lease_lost" });
      continue;
    }
    const err = result.error;
    deps.log.warn("model call failed", { ...exec.fields, attempt, ...errorFields(err) });
    const next = result.outputStarted || !FALLBACK_CODES.has(err.code) ? undefined : fallbacks.shift();
    if (next) {
      // Refused before its first token: the next model, under its own lease and reservation (a
      // new holder: the attempt count goes on), at once. Each turn starts again on the primary.
      countCall(deps, model, "fallback");
      deps.metrics.modelFallbacks.inc({ from: model.name, to: next.name, reason: err.code });
      deps.log.warn("model call refused before output; falling back", {
        ...exec.fields,
        from: model.name,
        to: next.name,
      });
      exec.emit("model.turn", {
        turn,
        reason: "fallback",
        from: model.name,
        to: next.name,
        error: err.code,
        status: err.status,
      });
      model = next;
      request = { ...request, model: next.name };
      continue;
    }
    if (result.outputStarted) {
      // Retrying would stream the answer again after the tenant saw its beginning.
      countCall(deps, model, "failed");
      return failed(
        "provider_error",
        `the model provider's stream broke after output had started (${err.message}); not retried, so no output is repeated`,
        result.text,
      );
    }
    const delay = retryDelayMs(deps.retry, { retry: attempt, err, elapsedMs: performance.now() - began });
    if (delay === null) {
      countCall(deps, model, "failed");
      return failed(err.code, err.message, textSoFar);
    }
    countCall(deps, model, "retried");
    deps.metrics.modelRetries.inc({ model: model.name, reason: err.code });
    deps.metrics.modelRetryDelay.observe(delay / 1000);
    exec.emit("model.retry", { attempt, delay_ms: delay, reason: err.code, status: err.status });
    try {
      await sleep(delay, undefined, { signal: exec.signal });
    } catch {
      // Cancelled (or shut down) during the wait: end now, not after it.
      return abortedOutcome(run, textSoFar);
    }
  }
}

/**
 * The tenant's daily budget before each turn, with no statement of its own while it is not spent:
 * the run's last usage write returned the state (its own spend, and what the tenant's other runs
 * had written by then), else the job's read at the start did. Only a spent budget is read again,
 * for the refusal's figures and to see that the UTC day has not turned since. This is only the
 * ledger's early word (the refusal without a Redis call); what bounds the spend is the
 * reservation each call takes with its lease (budgetDemands, docs/quota.md "Budgets: reserve,
 * then settle"). A failed read lets the turn go on: the reservation still guards it.
 */
async function budgetCheck(exec: Execution): Promise<string | null> {
  if (!(exec.run.budgetSpent ?? exec.job.budgetSpent)) return null;
  try {
    const refusal = await budgetRefusal(exec.deps.db, exec.job.tenantId);
    // Not spent any more (a new UTC day, or the operator raised the budget): no read next turn.
    if (!refusal) exec.run.budgetSpent = false;
    return refusal ? budgetMessage(refusal) : null;
  } catch (err) {
    exec.deps.log.warn("budget check failed; the turn goes on", { ...exec.fields, ...errorFields(err) });
    return null;
  }
}

/** Nano-USD (1e-9 $) per US dollar: budgets count in integers, exact for prices per million tokens. */
const NANO = 1_000_000_000;
/**
 * How long a budget's spend counter outlives its last write: a day's, past the day's end; a
 * tree's, past a quiet spell (a longer one re-seeds it from the ledger's floor at the next run).
 */
const BUDGET_TTL_MS = 2 * 86_400_000;

/**
 * What this call reserves before it is made: its worst case (the prompt as counted, plus the
 * request's output bound, priced by the registry) against each budget it counts toward. None
 * for an unpriced model (it spends nothing) or a tenant without a budget.
 *
 * The tenant's day is the host's UTC date (the key's name); the ledger's spend read at the run's
 * start is the counter's floor only on the same day, so Redis losing its data never restarts a
 * day from 0 for a run that knows better.
 */
function budgetDemands(exec: Execution, model: ModelEntry, request: TurnRequest): BudgetDemand[] {
  const { dailyBudget: daily, treeBudget: tree } = exec.job;
  if (!daily && !tree) return [];
  const promptTokens = estimateUsage(request, "", []).promptTokens;
  const maxOutput = request.maxOutputTokens ?? exec.deps.defaultMaxOutputTokens ?? AGENT_LIMITS.defaultMaxOutputTokens;
  const demands: BudgetDemand[] = [];
  if (model.pricing) {
    const amountNano = Math.ceil(callCostUsd({ promptTokens, completionTokens: maxOutput }, model.pricing) * NANO);
    const day = new Date().toISOString().slice(0, 10);
    if (daily) {
      demands.push({
        key: budgetKeys.tenantDay(exec.job.tenantId, day),
        limitNano: Math.round(daily.budgetUsd * NANO),
        amountNano,
        floorNano: daily.day === day ? Math.round(daily.spentUsd * NANO) : 0,
        ttlMs: BUDGET_TTL_MS,
      });
    }
    if (tree && tree.maxCostUsd !== null) {
      demands.push({
        key: budgetKeys.tree(tree.rootJobId),
        limitNano: Math.round(tree.maxCostUsd * NANO),
        amountNano,
        floorNano: Math.round(tree.spentUsd * NANO),
        ttlMs: BUDGET_TTL_MS,
      });
    }
  }
  // Tokens need no price: an unpriced model's calls count toward max_tokens too.
  if (tree && tree.maxTokens !== null) {
    demands.push({
      key: budgetKeys.treeTokens(tree.rootJobId),
      limitNano: tree.maxTokens,
      amountNano: promptTokens + maxOutput,
      floorNano: tree.spentTokens,
      ttlMs: BUDGET_TTL_MS,
    });
  }
  return demands;
}

/**
 * Settle the call's reservations to its real cost (0 for a call that produced nothing). Counted
 * once per holder however often it is sent; a settle Redis does not answer leaves the
 * reservation to expire with the lease, and the ledger has the call either way.
 */
async function settleBudgets(
  exec: Execution,
  admitted: AdmittedTurn,
  budgets: readonly BudgetDemand[],
  spent: { costUsd: number; tokens: number },
): Promise<void> {
  const q = exec.deps.quota;
  if (!q || !admitted.lease?.budgets?.length) return;
  const amountNano = Math.round(spent.costUsd * NANO);
  const outcome = await q.store.settle(
    admitted.lease.holder,
    budgets.map((b) => ({ key: b.key, amountNano: isTokenBudget(b.key) ? spent.tokens : amountNano, ttlMs: b.ttlMs })),
  );
  settledQuota(exec.deps, admitted.lease);
  exec.deps.metrics.budgetSettlements.inc({ outcome });
  if (outcome === "unavailable") {
    exec.deps.log.warn("budget settlement not sent; the reservation expires with the lease", {
      ...exec.fields,
      holder: admitted.lease.holder,
    });
  }
}

/** What a call reserved against its cost budgets, in US dollars: one amount for all of them (0: none). */
function reservedUsdOf(budgets: readonly BudgetDemand[]): number {
  const cost = budgets.find((b) => !isTokenBudget(b.key));
  return cost ? cost.amountNano / NANO : 0;
}

/** A budget amount in dollars as the messages say it ($0.00409). */
const usdText = (nano: number) => `$${(nano / NANO).toFixed(6).replace(/0+$/, "").replace(/\.$/, "")}`;

function exhaustedMessage({ budgetExhausted: b }: BudgetExhausted): string {
  const refused = "this call was refused before it was made";
  if (isTokenBudget(b.key)) {
    return `this job's tree used ${b.spentNano} tokens of its limit of ${b.limitNano} (limits.max_tokens), with ${b.reservedNano} reserved by model calls in flight; ${refused}`;
  }
  const whose = b.key.startsWith("tree:")
    ? `this job's tree spent ${usdText(b.spentNano)} of its limit of ${usdText(b.limitNano)} (limits.max_cost_usd)`
    : `this tenant spent ${usdText(b.spentNano)} of its daily budget of ${usdText(b.limitNano)} (UTC day)`;
  return `${whose}, with ${usdText(b.reservedNano)} reserved by model calls in flight; ${refused}`;
}

/**
 * A refused call's outcome: the run fails `budget_exceeded`, or, when the tree's max_cost_usd
 * refused it and the job's `limits.on_budget` is `ask`, it waits at a `budget` waitpoint holding
 * no slot (the acquire that refused took none; suspendRun releases the sandbox). The wait names
 * the turn the journal ends at (this turn was never journaled: it starts again on approval).
 */
function budgetOutcome(
  exec: Execution,
  refused: BudgetExhausted,
  at: { model: ModelEntry; turn: number; textSoFar: string },
): FinalOutcome | WaitOutcome {
  const b = refused.budgetExhausted;
  if (!b.key.startsWith("tree:") || exec.job.treeBudget?.onBudget !== "ask") {
    return failed("budget_exceeded", exhaustedMessage(refused), at.textSoFar);
  }
  // Unique per wait: a run approved with too little waits again at the same turn.
  const callId = `budget_${at.turn}_${crypto.randomUUID().slice(0, 8)}`;
  return {
    state: "waiting",
    kind: "budget",
    checkpoint: { v: 2, callId, turn: at.turn - 1, budget: true },
    call: { id: callId, name: at.model.name, args: { spent_usd: b.spentNano / NANO, limit_usd: b.limitNano / NANO } },
    text: at.textSoFar,
    approval: approvalSettings(exec.job.agent?.definition ?? null),
    note: exhaustedMessage(refused),
  };
}

function countCall(
  deps: RunDeps,
  model: ModelEntry,
  outcome: "ok" | "retried" | "fallback" | "failed" | "aborted",
): void {
  deps.metrics.modelCalls.inc({ model: model.name, outcome });
}

/**
 * Record one call's tokens (model_usage row + the job's sums, one statement) and count them. A
 * failed write is logged and the run goes on: usage must not fail the tenant's job.
 */
async function recordUsage(
  exec: Execution,
  call: {
    model: ModelEntry;
    request: TurnRequest;
    text: string;
    calls: ModelToolCall[];
    /** What the provider's usage chunk said; undefined: estimated from the characters. */
    reported: ModelUsage | undefined;
    /** What the call reserved against its cost budgets (US dollars), summed on the job as usage.reserved_usd. */
    reservedUsd: number;
    /**
     * Settle the call's budget reservations to its cost, BEFORE the ledger's write: the Redis
     * counter is then never behind the ledger, so taking the larger of the two (the floor a run
     * reads from Postgres at its start, acquire.lua) never counts a call twice. Settled after
     * the write, a run starting in between read a floor with the call in it, raised the counter
     * to it, and the settle added the call again (seen: 20.45 vs 12.27 m$ in
     * budget-reservations.test.ts). A host dying between the two leaves Redis ahead of the
     * ledger: the budget errs on the side of refusing.
     */
    settle: (spent: { costUsd: number; tokens: number }) => Promise<void>;
  },
): Promise<ModelUsage & { estimated: boolean; costUsd: number | null }> {
  const { deps } = exec;
  const { model, reported } = call;
  const usage = reported ?? estimateUsage(call.request, call.text, call.calls);
  const estimated = reported === undefined;
  const labels = { model: model.name, estimated: String(estimated) };
  deps.metrics.modelTokens.inc({ ...labels, kind: "prompt" }, usage.promptTokens);
  deps.metrics.modelTokens.inc({ ...labels, kind: "completion" }, usage.completionTokens);
  const costUsd = model.pricing ? callCostUsd(usage, model.pricing) : null;
  if (costUsd !== null) deps.metrics.modelCost.inc({ model: model.name, tenant: exec.job.tenantId }, costUsd);
  await call.settle({ costUsd: costUsd ?? 0, tokens: usage.promptTokens + usage.completionTokens });
  try {
    exec.run.budgetSpent = await recordModelUsage(deps.db, exec.id, {
      tenantId: exec.job.tenantId,
      model: model.name,
      ...usage,
      estimated,
      reservedUsd: call.reservedUsd,
      ...(model.pricing ? { pricing: model.pricing } : {}),
    });
  } catch (err) {
    deps.log.warn("model usage not recorded", { ...exec.fields, ...usage, estimated, ...errorFields(err) });
  }
  return { ...usage, estimated, costUsd };
}

/**
 * A model call's span attributes before it is made (OpenTelemetry GenAI conventions): the
 * registry's public name as `gen_ai.request.model` (what the job named; the upstream id is the
 * provider's business), and the request's sampling and output bound when set.
 */
function modelSpanAttributes(model: ModelEntry, request: TurnRequest, attempt: number): Attributes {
  return {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": model.name,
    ...(request.maxOutputTokens == null ? {} : { "gen_ai.request.max_tokens": request.maxOutputTokens }),
    ...(request.temperature == null ? {} : { "gen_ai.request.temperature": request.temperature }),
    ...(request.topP == null ? {} : { "gen_ai.request.top_p": request.topP }),
    "ear.attempt": attempt,
  };
}

/** A call's cost in US dollars for the metric (the ledger's own is computed in Postgres numeric). */
export function callCostUsd(usage: ModelUsage, pricing: ModelPricing): number {
  return (usage.promptTokens * pricing.inputUsdPerMtok + usage.completionTokens * pricing.outputUsdPerMtok) / 1_000_000;
}

/**
 * Tokens estimated from characters (CHARS_PER_TOKEN) when the provider sent no usage: the
 * prompt is every message's text plus the tool specs as sent, the completion the reply's text
 * plus its tool calls' names and arguments. At least one token each for a call that happened.
 */
export function estimateUsage(request: TurnRequest, text: string, calls: ModelToolCall[]): ModelUsage {
  let promptChars = 0;
  for (const m of request.messages) {
    promptChars += m.content.length;
    if ("toolCalls" in m) promptChars += JSON.stringify(m.toolCalls).length;
  }
  if (request.tools?.length) promptChars += JSON.stringify(request.tools).length;
  let completionChars = text.length;
  for (const c of calls) completionChars += c.name.length + JSON.stringify(c.args ?? {}).length;
  return {
    promptTokens: Math.max(1, Math.ceil(promptChars / CHARS_PER_TOKEN)),
    completionTokens: Math.max(1, Math.ceil(completionChars / CHARS_PER_TOKEN)),
  };
}

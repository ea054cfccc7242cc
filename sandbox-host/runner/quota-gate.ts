/**
 * The quota gate in front of every model turn: a named lease per turn (holder = execution id +
 * turn, so a late release of an earlier turn can never free this one), a bounded wait visible as
 * `quota.waiting`, and the holder-side rule that an expired lease is lost (docs/quota.md). A lost
 * lease stops that one model call (its `lost` signal), never the run: model-call.ts asks the turn
 * again under a new lease, within the run's wait budget.
 */
import type { FinalOutcome } from "../../src/db/ownership-repo";
import { type ModelEntry, tenantModelLimit } from "../../src/domain/models";
import { quotaKeys } from "../../src/quota/keys";
import type { BudgetDemand, QuotaDemand, QuotaLease } from "../../src/quota/lease-store";
import { acquireWithWait } from "../../src/quota/wait";
import { inSpan } from "../tracing/spans";
import { abortedOutcome, type Execution, failed, type QuotaGate, type RunDeps } from "./run-context";

/** A turn's lease (null = no quota), `lost` aborted when a renewal finds it gone or past its deadline. */
export interface AdmittedTurn {
  lease: QuotaLease | null;
  lost: AbortSignal;
  /** How long the wait for it took (0 without quota). */
  waitedMs: number;
}

/** A budget refused the call (its spend plus what calls in flight reserved reached its limit). */
export interface BudgetExhausted {
  budgetExhausted: { key: string; spentNano: number; reservedNano: number; limitNano: number };
}

/** Never aborted: the `lost` signal of a turn without quota. */
const NEVER_LOST = new AbortController().signal;

/**
 * A lease for one model turn (null = no quota configured), or the outcome that ends the run.
 * `turn` names the holder: the turn's number, `<turn>.<attempt>` for a retry. `afterLoss`: this
 * wait follows a lost lease, bounded by what is left of the turn's wait budget, and a timeout
 * fails the run `quota_lease_lost` (the lease was lost and none came back in time).
 */
export async function acquireQuota(
  exec: Execution,
  call: {
    model: ModelEntry;
    turn: number | string;
    afterLoss?: { maxWaitMs: number; retry: number };
    /** Budget reservations taken with the slots, in the same script (none: no budget applies). */
    budgets?: readonly BudgetDemand[];
  },
): Promise<AdmittedTurn | FinalOutcome | BudgetExhausted> {
  const { deps, run, job } = exec;
  const { model, turn, afterLoss, budgets = [] } = call;
  const q = deps.quota;
  const modelLimit = modelQuotaLimit(q, model);
  if (!q || (modelLimit <= 0 && budgets.length === 0)) return { lease: null, lost: NEVER_LOST, waitedMs: 0 };
  // Keyed by the resolved model: a client cannot mint buckets of its own by naming models.
  const demands: QuotaDemand[] = [];
  if (modelLimit > 0) {
    demands.push({ key: quotaKeys.model(model.name), limit: modelLimit });
    const perTenant = tenantModelLimit(model, job.tenantId);
    if (perTenant !== null) demands.push({ key: quotaKeys.tenantModel(job.tenantId, model.name), limit: perTenant });
    if (q.tenantLimit > 0) demands.push({ key: quotaKeys.tenant(job.tenantId), limit: q.tenantLimit });
  }
  const outcome = await inSpan(
    deps.tracing.tracer,
    "quota.wait",
    { attributes: { "ear.quota.turn": String(turn) } },
    async (span) => {
      const waited = await acquireWithWait(q.store, {
        holder: `${exec.id.executionId}:${turn}`,
        demands,
        budgets,
        maxWaitMs: afterLoss?.maxWaitMs ?? q.maxWaitMs,
        signal: exec.signal,
        onWaiting: (info) =>
          exec.emit("quota.waiting", { reason: info.reason, key: info.key ?? null, ahead: info.ahead ?? null }),
      });
      span.setAttributes({ "ear.outcome": waited.kind, "ear.quota.waited_ms": Math.round(waited.waitedMs) });
      return waited;
    },
  );
  q.onWait?.(outcome);
  if (budgets.length > 0 && outcome.kind === "admitted") deps.metrics.budgetReservations.inc({ outcome: "reserved" });
  if (outcome.kind === "budget_exhausted") deps.metrics.budgetReservations.inc({ outcome: "refused" });
  if (outcome.kind === "aborted") return abortedOutcome(run, "");
  if (outcome.kind === "budget_exhausted") {
    const { key, spentNano, reservedNano, limitNano } = outcome;
    return { budgetExhausted: { key, spentNano, reservedNano, limitNano } };
  }
  if (outcome.kind === "timed_out" && afterLoss) {
    return failed(
      "quota_lease_lost",
      `the model quota lease was lost and no slot came back within the wait limit (QUOTA_MAX_WAIT_MS, ${q.maxWaitMs} ms; retry ${afterLoss.retry}); no model call was made without a lease`,
      "",
    );
  }
  if (outcome.kind === "timed_out") {
    return failed(
      "quota_unavailable",
      outcome.reason === "redis_unavailable"
        ? "the model quota could not be checked (Redis unavailable) within the wait limit"
        : `no model quota slot became free within ${Math.round(outcome.waitedMs)} ms`,
      "",
    );
  }
  const lost = new AbortController();
  q.track(outcome.lease, () => lost.abort(new Error("quota lease lost")));
  return { lease: outcome.lease, lost: lost.signal, waitedMs: outcome.waitedMs };
}

/** A model's global slots: its registry `concurrency`, else the host's QUOTA_MODEL_LIMIT (0 = no quota). */
export function modelQuotaLimit(q: Pick<QuotaGate, "modelLimit"> | undefined, model: ModelEntry): number {
  if (!q) return 0;
  return model.concurrency ?? q.modelLimit;
}

/** The budget reservations of a released lease, renewed on their own until they are settled. */
const unsettled = new WeakMap<QuotaLease, QuotaLease>();

/**
 * The turn is over: stop renewing its lease and free the slot. Its budget reservations are kept
 * renewed until `settledQuota`: the call's cost is known only after its usage is counted, and a
 * reservation left to expire meanwhile let a fourth call in under a budget that held three
 * (budget-reservations.test.ts, with the host loaded by 40 runs starting at once).
 */
export async function releaseQuota(deps: RunDeps, lease: QuotaLease | null): Promise<void> {
  if (!lease) return;
  deps.quota?.untrack(lease);
  if (deps.quota && lease.budgets?.length) {
    const held: QuotaLease = { holder: lease.holder, keys: [], budgets: lease.budgets, validUntil: lease.validUntil };
    unsettled.set(lease, held);
    // Lost (a renewal found it expired): settle.lua still counts the call; nothing to stop.
    deps.quota.track(held, () => {});
  }
  await deps.quota?.store.release(lease);
}

/** The lease's reservations were settled: stop renewing them. */
export function settledQuota(deps: RunDeps, lease: QuotaLease): void {
  const held = unsettled.get(lease);
  if (held) deps.quota?.untrack(held);
  unsettled.delete(lease);
}

/**
 * The holder-side rule of a lease (lease-store.ts): usable only while `isValid`. Past its local
 * deadline the lease is lost whatever Redis would say: stop this model call, as a renewal that
 * found it gone would (the caller asks the turn again under a new lease).
 */
export function leaseRanOut(exec: Execution, lease: QuotaLease | null): boolean {
  const { deps } = exec;
  if (!lease || !deps.quota || deps.quota.store.isValid(lease)) return false;
  deps.log.warn("quota lease ran out before it was renewed; stopping this model call", {
    ...exec.fields,
    holder: lease.holder,
  });
  // Counted like a lease a renewal found purged (docs/observability.md): an acquire that came
  // back past its deadline under load failed runs with this counter still at 0.
  deps.metrics.quotaLeasesLost.inc();
  return true;
}

/**
 * A run's spend against its budget, for the inspector: what its calls cost, what they reserved
 * before they were made, and the tree's limits (the job's own `limits`, each at most its agent's,
 * else the agent's; `max_cost_usd` raised by approved budget waits). A delegated child spends from
 * its root's budget, which its root's inspector shows (docs/quota.md, "A tree's budget").
 */
import { useEffect, useState } from "preact/hooks";
import { usd } from "./answer";
import { client, type JobView } from "./api";

interface Limits {
  max_cost_usd: number | null;
  max_tokens: number | null;
  on_budget: "fail" | "ask";
}

/** The smaller of two limits, null meaning none (as Postgres' least() reads them on the host). */
const least = (a: number | null | undefined, b: number | null | undefined): number | null =>
  a == null ? (b ?? null) : b == null ? a : Math.min(a, b);

/** The root job's limits as the host applies them: the job's own narrowed by its agent's. */
export function effectiveLimits(job: JobView, agent: Limits | null): Limits {
  const own = job.limits;
  const cost = least(own?.max_cost_usd, agent?.max_cost_usd);
  return {
    max_cost_usd: cost === null ? null : cost + job.budget_added_usd,
    max_tokens: least(own?.max_tokens, agent?.max_tokens),
    on_budget: own?.on_budget ?? agent?.on_budget ?? "fail",
  };
}

export function Budget({ job }: { job: JobView }) {
  // undefined: still reading the agent's version; null: none to read (no agent, or it failed).
  const [agent, setAgent] = useState<Limits | null | undefined>(undefined);
  // The tree's spend (the job's and its descendants'), what its limits count; null: not read.
  const [treeSpent, setTreeSpent] = useState<number | null>(null);
  const name = job.agent?.name ?? null;
  const version = job.agent?.version ?? null;
  const root = !job.root_job_id || job.root_job_id === job.id;
  const { id, state } = job;
  useEffect(() => {
    if (name === null || version === null) {
      setAgent(null);
      return;
    }
    const ctl = new AbortController();
    client
      .getAgentVersion(name, version, { signal: ctl.signal })
      .then((a) => ctl.signal.aborted || setAgent(a.agent.limits))
      .catch(() => ctl.signal.aborted || setAgent(null));
    return () => ctl.abort();
  }, [name, version]);
  useEffect(() => {
    if (!root) return;
    const ctl = new AbortController();
    client
      .tree(id, { signal: ctl.signal })
      .then((t) => ctl.signal.aborted || setTreeSpent(t.tree.subtree_usage.cost_usd))
      .catch(() => {});
    return () => ctl.abort();
    // Read again when the job's state changes (its end, a wait): the spend moved.
  }, [id, root, state]);
  if (!root && job.root_job_id) {
    return (
      <p class="meta" data-testid="run-budget">
        spent {usd(job.usage.cost_usd)} · spends from its root's budget:{" "}
        <a href={`#/jobs/${job.root_job_id}`}>{job.root_job_id.slice(0, 8)}</a>
      </p>
    );
  }
  if (agent === undefined) return null;
  const l = effectiveLimits(job, agent);
  const spent = treeSpent ?? job.usage.cost_usd ?? 0;
  const tokens = job.usage.prompt_tokens + job.usage.completion_tokens;
  return (
    <p
      class="meta"
      data-testid="run-budget"
      data-spent={spent}
      data-reserved={job.usage.reserved_usd}
      data-limit={l.max_cost_usd ?? ""}
      data-on-budget={l.on_budget}
    >
      {l.max_cost_usd === null ? (
        <>spent {usd(job.usage.cost_usd)} · no cost limit</>
      ) : (
        <>
          <label>
            spent {usd(spent)} of {usd(l.max_cost_usd)}{" "}
            <meter min={0} max={l.max_cost_usd} value={Math.min(spent, l.max_cost_usd)} />
          </label>{" "}
          ({treeSpent === null ? "this job" : "this job and its delegated children"}) · at the limit: {l.on_budget}
          {job.budget_added_usd > 0 && <> · raised by {usd(job.budget_added_usd)}</>}
        </>
      )}{" "}
      · reserved {usd(job.usage.reserved_usd)} before its calls
      {l.max_tokens !== null && (
        <>
          {" "}
          · {tokens} of {l.max_tokens} tokens
        </>
      )}
    </p>
  );
}

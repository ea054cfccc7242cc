/**
 * A bulk replay (POST /v1/replays): every job the filter selects rerun from step 0 (a fork from
 * step 0, as POST /v1/jobs/{id}/rerun), with its own agent version or the body's `agent`. The
 * reruns enter the queue as a batch does: one statement (createJobs), all or none, under the
 * tenant's queued-jobs limit and daily budget; at claim they take the tenant's fair share like
 * any of its jobs, so a replay never takes another tenant's share.
 */
import type { CreateReplayBody } from "../../src/contracts/fork";
import type { BatchItem, ResolvedAgent } from "../../src/db/jobs-repo";
import { insertReplay, selectReplaySources } from "../../src/db/replays-repo";
import { callDependency, type Deps } from "../deps";
import { forkJobBody } from "./fork";
import { assertBodyAdmitted, enqueueBatch, resolveJobAgent, type SubmitOptions } from "./submit";

export async function createReplay(
  deps: Deps,
  tenantId: string,
  body: CreateReplayBody,
  opts: SubmitOptions,
  defer?: (work: Promise<unknown>) => void,
): Promise<{ id: string; jobsTotal: number }> {
  const db = deps.db();
  const started = Date.now();
  const sources = await callDependency("postgres", () => selectReplaySources(db, tenantId, body.filter));
  // Each distinct agent version is resolved (and checked for use) once.
  const agents = new Map<string, Promise<ResolvedAgent | undefined>>();
  const items: BatchItem[] = [];
  const id = crypto.randomUUID();
  for (const source of sources) {
    const submit = forkJobBody(source, body.agent, undefined);
    assertBodyAdmitted(opts.models, tenantId, submit);
    const ref = submit.agent;
    const read =
      ref === undefined ? undefined : (agents.get(ref) ?? resolveJobAgent(db, opts.models, tenantId, submit));
    if (ref !== undefined && read) agents.set(ref, read);
    items.push({
      id: crypto.randomUUID(),
      body: submit,
      agent: await read,
      requestHash: null,
      rerunOf: { jobId: source.id, replayId: id },
    });
  }
  await enqueueBatch(deps, tenantId, items, opts, started, defer);
  // After the jobs: a refused batch leaves no replay behind.
  await callDependency("postgres", () =>
    insertReplay(db, { id, tenantId, filter: body.filter, agent: body.agent ?? null, jobsTotal: items.length }),
  );
  return { id, jobsTotal: items.length };
}

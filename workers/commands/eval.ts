/**
 * An eval (POST /v1/evals, docs/api.md "Evals"): the cases' jobs enter the queue as a batch does
 * (createJobs: one statement, all or none, under the tenant's queued-jobs limit and daily budget;
 * at claim the tenant's fair share), then the eval and its cases are written in one statement.
 * A refused batch leaves no eval behind; a gateway that dies between the two statements leaves
 * jobs that run unscored (no eval names them), as a replay's can. The hosts score each case when
 * its job ends (sandbox-host/evals/eval-scorer.ts).
 */
import { ApiError } from "../../src/contracts/errors";
import { type CreateEvalBody, scorerNameOf } from "../../src/contracts/eval";
import type { ChatMessage } from "../../src/contracts/job";
import type { Db } from "../../src/db/client";
import { insertEval, type NewEvalCase } from "../../src/db/evals-repo";
import type { BatchItem, ResolvedAgent } from "../../src/db/jobs-repo";
import { selectReplayedSources, selectReplaySources } from "../../src/db/replays-repo";
import type { JobRow } from "../../src/db/schema";
import { jsonSchemaProblem } from "../../src/domain/json-schema";
import { callDependency, type Deps } from "../deps";
import { enqueueBatch, resolveJobAgent, type SubmitOptions } from "./submit";

export async function createEval(
  deps: Deps,
  tenantId: string,
  body: CreateEvalBody,
  opts: SubmitOptions,
  defer?: (work: Promise<unknown>) => void,
): Promise<{ id: string; casesTotal: number }> {
  const db = deps.db();
  const started = Date.now();
  await checkScorers(db, opts, tenantId, body);
  const agent = (await resolveJobAgent(db, opts.models, tenantId, { agent: body.agent })) as ResolvedAgent;
  const ref = `${agent.name}@${agent.version}`;
  const cases: Array<Omit<NewEvalCase, "jobId">> = body.cases
    ? body.cases.map((c) => ({ input: c.input, expect: c.expect ?? null, sourceJobId: null }))
    : (await sourcesOf(db, tenantId, body.replay_of as NonNullable<CreateEvalBody["replay_of"]>)).map(caseOfSource);
  const items: BatchItem[] = cases.map((c) => ({
    id: crypto.randomUUID(),
    body: { agent: ref, input: c.input },
    agent,
    requestHash: null,
  }));
  await enqueueBatch(deps, tenantId, items, opts, started, defer);
  const id = crypto.randomUUID();
  await callDependency("postgres", () =>
    insertEval(db, {
      id,
      tenantId,
      agent: body.agent,
      agentName: agent.name,
      agentVersion: agent.version,
      scorers: body.scorers,
      replayOf: body.replay_of ?? null,
      cases: cases.map((c, i) => ({ ...c, jobId: (items[i] as BatchItem).id })),
    }),
  );
  return { id, casesTotal: cases.length };
}

/**
 * What the schema cannot check: a json_schema scorer's schema is a usable JSON Schema (the check
 * an agent's response_format gets), a regex compiles (compiling never backtracks; matching is the
 * host's, time-bounded), and a judge names an agent of the tenant it may run. A 400 names the scorer.
 */
async function checkScorers(db: Db, opts: SubmitOptions, tenantId: string, body: CreateEvalBody): Promise<void> {
  for (const [i, s] of body.scorers.entries()) {
    const at = `scorers[${i}]`;
    if (s.type === "json_schema") {
      const problem = jsonSchemaProblem(s.schema);
      if (problem) throw new ApiError("invalid_request", `${at}.schema: ${problem}`);
    } else if (s.type === "regex") {
      try {
        new RegExp(s.pattern, s.flags ?? "");
      } catch (err) {
        throw new ApiError("invalid_request", `${at}.pattern: ${err instanceof Error ? err.message : String(err)}`);
      }
    } else if (s.type === "judge") {
      try {
        await resolveJobAgent(db, opts.models, tenantId, { agent: s.agent });
      } catch (err) {
        if (err instanceof ApiError) throw new ApiError(err.code, `${at} (${scorerNameOf(s)}).${err.message}`);
        throw err;
      }
    }
  }
}

async function sourcesOf(
  db: Db,
  tenantId: string,
  replayOf: NonNullable<CreateEvalBody["replay_of"]>,
): Promise<JobRow[]> {
  if (typeof replayOf !== "string") {
    return callDependency("postgres", () => selectReplaySources(db, tenantId, replayOf));
  }
  const sources = await callDependency("postgres", () => selectReplayedSources(db, tenantId, replayOf));
  if (!sources) throw new ApiError("not_found", "replay_of: replay not found");
  return sources;
}

/** A source job as a case: its input, expecting its answer when it completed with one. */
function caseOfSource(source: JobRow): Omit<NewEvalCase, "jobId"> {
  return {
    input: source.input as { messages: ChatMessage[] },
    expect: source.state === "completed" ? source.output : null,
    sourceJobId: source.id,
  };
}

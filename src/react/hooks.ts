/**
 * `edge-agent-runtime/react`: React hooks for one run and its delegation tree, on the typed
 * client (src/client/). `useJob(id)` reads the job, then follows its event stream, which resumes
 * by itself after a dropped connection (Last-Event-ID, no gap, no duplicate) and ends at the
 * terminal event, when the job is read once more for its final state, output and latency.
 * `useJobTree(id)` reads the tree and reads it again whenever the tree's stream announces or
 * ends a job. A job-bound `read` token (POST /v1/tokens `{job_id}`) is all either needs.
 *
 *   <EarProvider client={new EarClient({ baseUrl, credential: () => fetchToken(jobId) })}>
 *     const { state, output, events, latency } = useJob(jobId);
 */
import { createContext, createElement, type ReactNode, useContext, useEffect, useState } from "react";
import { EarClient } from "../client/client";
import type { EventEnvelope } from "../contracts/events";
import type { JobState, JobView, LatencyView } from "../contracts/job";
import { stateOfTerminalEvent } from "../contracts/job-state";
import type { TreeNode } from "../contracts/tree";

export type { ClientOptions } from "../client/client";
export type { EventEnvelope, JobState, JobView, LatencyView, TreeNode };
export { EarClient };

const ClientContext = createContext<EarClient | null>(null);

/** Gives the hooks below their client. */
export function EarProvider(props: { client: EarClient; children?: ReactNode }) {
  return createElement(ClientContext.Provider, { value: props.client }, props.children);
}

function useClient(explicit?: EarClient): EarClient {
  const provided = useContext(ClientContext);
  const client = explicit ?? provided;
  if (!client)
    throw new Error("useJob/useJobTree: no client (wrap the tree in <EarProvider client={…}> or pass { client })");
  return client;
}

export interface JobRun {
  /** The job as last read (null before the first read). */
  job: JobView | null;
  /** Live: from the events while it runs, the read job's once it ended. */
  state: JobState | null;
  /** The answer so far: the current model turn's text while it runs, the job's `output` once it ended. */
  output: string;
  /** Every event so far, in offset order, once each. */
  events: EventEnvelope[];
  latency: LatencyView | null;
  /** Why following stopped (a 4xx such as 403/404/410, or the stream's retries ran out). */
  error: unknown;
}

const IDLE: JobRun = { job: null, state: null, output: "", events: [], latency: null, error: null };

/** Live state of one job; pass null to follow nothing. */
export function useJob(id: string | null | undefined, opts: { client?: EarClient } = {}): JobRun {
  const client = useClient(opts.client);
  const [run, setRun] = useState<JobRun>(IDLE);
  useEffect(() => {
    setRun(IDLE);
    if (!id) return;
    const abort = new AbortController();
    const signal = abort.signal;
    void (async () => {
      try {
        const first = (await client.get(id, { signal })).job;
        setRun((r) => ({ ...r, job: first, state: first.state, output: first.output ?? "", latency: first.latency }));
        let turnText = "";
        for await (const { event } of client.events(id, { signal })) {
          if (event.type === "model.turn") turnText = "";
          if (event.type === "model.delta") turnText += event.payload.text;
          const live = liveState(event.type);
          setRun((r) => ({
            ...r,
            events: [...r.events, event],
            state: live ?? r.state,
            output: turnText !== "" || event.type === "model.turn" ? turnText : r.output,
          }));
        }
        const last = (await client.get(id, { signal })).job;
        setRun((r) => ({ ...r, job: last, state: last.state, output: last.output ?? r.output, latency: last.latency }));
      } catch (error) {
        if (!signal.aborted) setRun((r) => ({ ...r, error }));
      }
    })();
    return () => abort.abort();
  }, [client, id]);
  return run;
}

/** The state an event moves a job to, when it moves it. */
function liveState(type: string): JobState | null {
  if (type === "run.started" || type === "run.resumed" || type === "run.recovered" || type === "run.forked") {
    return "running";
  }
  if (type === "run.suspended") return "waiting";
  return stateOfTerminalEvent(type);
}

export interface JobTreeRun {
  tree: TreeNode | null;
  error: unknown;
}

/** Events after which the tree's shape or states changed. */
const TREE_CHANGES = new Set(["child.created", "child.finished", "run.started", "run.suspended", "run.resumed"]);

/** The job's delegation tree (GET /v1/jobs/{id}/tree), read again as its jobs start, delegate and end. */
export function useJobTree(id: string | null | undefined, opts: { client?: EarClient } = {}): JobTreeRun {
  const client = useClient(opts.client);
  const [run, setRun] = useState<JobTreeRun>({ tree: null, error: null });
  useEffect(() => {
    setRun({ tree: null, error: null });
    if (!id) return;
    const abort = new AbortController();
    const signal = abort.signal;
    let reading: Promise<void> | null = null;
    let again = false;
    /** One read at a time; changes during a read cause one more read after it. */
    const read = (): Promise<void> => {
      if (reading) {
        again = true;
        return reading;
      }
      reading = (async () => {
        do {
          again = false;
          const { tree } = await client.tree(id, { signal });
          setRun({ tree, error: null });
        } while (again && !signal.aborted);
      })().finally(() => {
        reading = null;
      });
      return reading;
    };
    void (async () => {
      try {
        await read();
        for await (const { event } of client.events(id, { signal, descendants: true })) {
          if (TREE_CHANGES.has(event.type) || stateOfTerminalEvent(event.type) !== null) void read().catch(() => {});
        }
        await read();
      } catch (error) {
        if (!signal.aborted) setRun((r) => ({ ...r, error }));
      }
    })();
    return () => abort.abort();
  }, [client, id]);
  return run;
}

/**
 * The run's journal on the host: each completed step is appended (fenced, src/db/journal-repo.ts)
 * before the next step starts, and an execution that recovers a job rebuilds the conversation
 * from it (`rebuildFromJournal`). The steps:
 *  - `turn`: a model turn's assistant message and its tool calls. Noted, not written: it rides
 *    on the next write of the run (the first call's `call` row, or the user message after it),
 *    which always comes before anything the turn's calls do. A turn without calls that ends the
 *    run is never journaled (the terminal write holds its answer).
 *  - `call`: a tool call is about to be made (its own write, before the call: a recovery that
 *    finds a `call` without a `result` knows the call may have happened).
 *  - `result`: the tool result the model reads, written as soon as the call returns.
 *  - `user`: a user message the loop added (input applied, the repair note, the recovery note).
 *  - `recovered`: an execution continued the job from here (recovery.ts; written by the repo).
 *  - `snapshot`: the workspace after the step before, stored as a blob (workspace.ts): what an
 *    execution that continues from here unpacks into its new sandbox.
 * The journal is the conversation after the job's own input (and the agent's instructions):
 * neither is copied into it, both are in the job row and its pinned agent version.
 */
import type { JournalRecord, JournalRow } from "../../src/db/journal-repo";
import type { ExecutionIdentity } from "../../src/domain/identity";
import type { ModelMessage, ModelToolCall } from "../model/types";

/** The run a journal writes for (run-context.ts's ActiveRun): its identity, and how it stops. */
interface JournaledRun {
  readonly identity: ExecutionIdentity;
  loseOwnership(): void;
}

/** What a run's journal needs from the host (`RunDeps.journal`): the fenced repo calls. */
export interface JournalStore {
  /** Append as `id`; false when the job no longer runs under it (nothing written). */
  append(id: ExecutionIdentity, rows: JournalRow[]): Promise<boolean>;
  /** The whole journal of a job, in order. */
  read(jobId: string): Promise<JournalRecord[]>;
  /** The recovering execution's first write: the `recovered` row, the job's recovery reason cleared. */
  recovered(id: ExecutionIdentity, payload: Record<string, unknown>): Promise<boolean>;
}

export type UserWhy = "input" | "repair" | "recovery";

export type Step =
  | { kind: "turn"; payload: { turn: number; text: string; calls: ModelToolCall[] } }
  | { kind: "call"; payload: { call_id: string; name: string; sandbox: boolean } }
  | { kind: "result"; payload: { call_id: string; content: string } }
  /** `turn`: the turn the message follows (the repair note's bounds the repair turn). */
  | { kind: "user"; payload: { content: string; why: UserWhy; turn: number } }
  /** The workspace as it stood after the step before (a blob of the tenant: workspace.ts). */
  | { kind: "snapshot"; payload: WorkspaceSnapshot };

/** One blob of a snapshot's chain: the tenant's blob `sha256`, `bytes` long. */
export interface WorkspaceLink {
  sha256: string;
  bytes: number;
}

/**
 * /workspace stored as the tenant's blob `sha256` (`bytes` long): a gzipped tar of the whole
 * workspace, or, with `base`, a diff (workspace-diff.ts) to apply after the chain `base` names in
 * order (a full snapshot first, then diffs). Every link of `base` is itself the `sha256` of an
 * earlier `snapshot` row of the same job.
 */
export interface WorkspaceSnapshot extends WorkspaceLink {
  base?: WorkspaceLink[];
}

/** A `snapshot` row's payload as the host reads it back (a row from before diffs has no `base`). */
export function snapshotFromPayload(payload: Record<string, unknown>): WorkspaceSnapshot {
  const out: WorkspaceSnapshot = { sha256: String(payload.sha256), bytes: Number(payload.bytes) };
  if (Array.isArray(payload.base) && payload.base.length > 0) {
    out.base = payload.base.map((l: Record<string, unknown>) => ({ sha256: String(l.sha256), bytes: Number(l.bytes) }));
  }
  return out;
}

/** One execution's journal writer: steps noted ride on the next write; a missed fence loses the run. */
export class RunJournal {
  private pending: Step[] = [];

  constructor(
    private readonly store: JournalStore,
    private readonly run: JournaledRun,
  ) {}

  /** A step that rides on the next write (it must be durable before the step after it starts). */
  note(step: Step): void {
    this.pending.push(step);
  }

  /**
   * Write the noted steps and `step` in one statement. False: the job no longer runs under this
   * execution; the run lost ownership (aborted, emits nothing more) and must not start the step.
   */
  async write(step?: Step): Promise<boolean> {
    const rows = step ? [...this.pending, step] : this.pending;
    this.pending = [];
    if (rows.length === 0) return true;
    const ok = await this.store.append(this.run.identity, rows as unknown as JournalRow[]);
    if (!ok) this.run.loseOwnership();
    return ok;
  }
}

/** Where the journal leaves a job: what a recovering execution continues from. */
export interface Rebuilt {
  /** The conversation after the base (instructions and the job's input). */
  messages: ModelMessage[];
  /** The last journaled turn (0: none). */
  turn: number;
  /** The last turn's text (the answer so far). */
  text: string;
  /** The last turn's calls with no result journaled, in order; `started`: a `call` row exists. */
  open: Array<{ call: ModelToolCall; started: boolean }>;
  /** The turn after which the repair turn was given (its user message is journaled), or null. */
  repairedAt: number | null;
  /** The seq of the last row (0: an empty journal). */
  lastSeq: number;
  /** Some `call` row named a sandbox tool since the last recovery: the run had a sandbox, whose workspace is gone. */
  hadSandbox: boolean;
  /** The last workspace snapshot journaled (any execution's), or null: what a continuation restores. */
  snapshot: WorkspaceSnapshot | null;
}

/**
 * The conversation and the loop's position from a job's journal, rows in seq order (the rows
 * of every earlier execution, recoveries included). Rows of a kind this host does not know are
 * skipped (a newer host may write more).
 */
export function rebuildFromJournal(records: readonly JournalRecord[]): Rebuilt {
  const out: Rebuilt = {
    messages: [],
    turn: 0,
    text: "",
    open: [],
    repairedAt: null,
    lastSeq: 0,
    hadSandbox: false,
    snapshot: null,
  };
  const started = new Set<string>();
  const answered = new Set<string>();
  let calls: ModelToolCall[] = [];
  for (const r of records) {
    out.lastSeq = r.seq;
    const step = { kind: r.kind, payload: r.payload } as Step;
    if (step.kind === "turn") {
      const { turn, text, calls: turnCalls } = step.payload;
      out.turn = turn;
      out.text = text;
      calls = turnCalls;
      out.messages.push(
        turnCalls.length > 0
          ? { role: "assistant", content: text, toolCalls: turnCalls }
          : { role: "assistant", content: text },
      );
    } else if (step.kind === "call") {
      started.add(step.payload.call_id);
      if (step.payload.sandbox) out.hadSandbox = true;
    } else if (step.kind === "result") {
      answered.add(step.payload.call_id);
      out.messages.push({ role: "tool", toolCallId: step.payload.call_id, content: step.payload.content });
    } else if (step.kind === "user") {
      if (step.payload.why === "repair") out.repairedAt = step.payload.turn;
      out.messages.push({ role: "user", content: step.payload.content });
    } else if (step.kind === "snapshot") {
      out.snapshot = snapshotFromPayload(step.payload as unknown as Record<string, unknown>);
    } else if (r.kind === "recovered") {
      // A sandbox reset already told: only a sandbox used since the last recovery is news.
      out.hadSandbox = false;
    }
  }
  out.open = calls.filter((c) => !answered.has(c.id)).map((call) => ({ call, started: started.has(call.id) }));
  return out;
}

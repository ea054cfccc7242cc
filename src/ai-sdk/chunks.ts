/**
 * One job's events (docs/api.md "Events") as the AI SDK's UI message chunks, the language
 * `useChat` renders: each model turn a step with its text part, tool calls and results as
 * dynamic tool parts, waits for a person as `data-approval` parts, timing facts as one
 * `data-timing` part, and a `finish` whose metadata carries the job's state and latency.
 *
 * Pure and synchronous, so the translation is tested on its own (test/unit/ai-sdk-chunks.test.ts):
 * the transport feeds it frames and writes what it returns.
 */
import type { UIMessage, UIMessageChunk } from "ai";
import type { EventEnvelope } from "../contracts/events";
import type { LatencyView } from "../contracts/job";
import type { FinalState } from "../contracts/job-state";
import { stateOfTerminalEvent } from "../contracts/job-state";

/** A wait for a person: an approval of a tool call, or an `ask_user` question. Replaced in place once decided. */
export interface ApprovalData {
  job_id: string;
  kind: "approval" | "input";
  call_id: string;
  tool: string;
  arguments: unknown;
  question: string | null;
  deadline_at: string;
  /** Set once the run resumed: `approve`, `deny`, `input` (an answer), with who decided. */
  decision: string | null;
  decided_by: string | null;
}

/** The job's timing facts as they arrive (event times, the host's clock), and its latency once it ended. */
export interface TimingData {
  job_id: string;
  started_at: string | null;
  prepared_at: string | null;
  first_output_at: string | null;
  finished_at: string | null;
  latency: LatencyView | null;
}

/** What a queued message waits for (transient: never kept in the message). */
export interface QueuedData {
  position: number;
}

export type EarDataParts = { approval: ApprovalData; timing: TimingData; queued: QueuedData };

/** The assistant message's metadata: the job it is, and, once finished, its state and latency. */
export interface EarMessageMetadata {
  job_id: string;
  state?: FinalState;
  latency?: LatencyView | null;
}

export type EarUIMessage = UIMessage<EarMessageMetadata, EarDataParts>;
export type EarChunk = UIMessageChunk<EarMessageMetadata, EarDataParts>;

/** Turns one job's events, in offset order, into chunks; `ended` once its terminal event came. */
export class AnswerChunks {
  private stepOpen = false;
  private textId: string | null = null;
  private turn = 0;
  private readonly timing: TimingData;
  private readonly approvals = new Map<string, ApprovalData>();
  /** The terminal state, once its event was translated. */
  ended: FinalState | null = null;

  constructor(readonly jobId: string) {
    this.timing = {
      job_id: jobId,
      started_at: null,
      prepared_at: null,
      first_output_at: null,
      finished_at: null,
      latency: null,
    };
  }

  /** The chunk that opens the answer: its message id is the job id, so a replay replaces it in place. */
  start(): EarChunk {
    return { type: "start", messageId: this.jobId, messageMetadata: { job_id: this.jobId } };
  }

  /** The chunks for one event (none for events a chat does not show). */
  event(event: EventEnvelope): EarChunk[] {
    const out: EarChunk[] = [];
    switch (event.type) {
      case "run.started":
      case "run.forked":
        this.timing.started_at ??= event.ts;
        out.push(this.timingChunk());
        break;
      case "run.prepared":
        this.timing.prepared_at ??= event.ts;
        out.push(this.timingChunk());
        break;
      case "model.turn":
        this.closeStep(out);
        this.turn = event.payload.turn;
        out.push({ type: "start-step" });
        this.stepOpen = true;
        break;
      case "model.delta": {
        if (event.payload.text === "") break;
        this.openStep(out);
        if (this.textId === null) {
          this.textId = `${this.jobId}:text:${this.turn}`;
          out.push({ type: "text-start", id: this.textId });
        }
        if (this.timing.first_output_at === null) {
          this.timing.first_output_at = event.ts;
          out.push(this.timingChunk());
        }
        out.push({ type: "text-delta", id: this.textId, delta: event.payload.text });
        break;
      }
      case "tool.call":
        this.openStep(out);
        this.closeText(out);
        out.push({
          type: "tool-input-available",
          toolCallId: event.payload.id,
          toolName: event.payload.name,
          input: event.payload.args,
          dynamic: true,
        });
        break;
      case "tool.result":
        if (event.payload.ok) {
          out.push({
            type: "tool-output-available",
            toolCallId: event.payload.id,
            output: event.payload.output,
            dynamic: true,
          });
        } else {
          const err = event.payload.output as { code?: unknown; message?: unknown } | null;
          const errorText = `${String(err?.code ?? "tool_error")}: ${String(err?.message ?? "")}`;
          out.push({ type: "tool-output-error", toolCallId: event.payload.id, errorText, dynamic: true });
        }
        break;
      case "tool.approval_requested":
        out.push(
          this.approvalChunk({
            job_id: this.jobId,
            kind: "approval",
            call_id: event.payload.call_id,
            tool: event.payload.tool,
            arguments: event.payload.arguments,
            question: null,
            deadline_at: event.payload.deadline_at,
            decision: null,
            decided_by: null,
          }),
        );
        break;
      case "input.requested":
        out.push(
          this.approvalChunk({
            job_id: this.jobId,
            kind: "input",
            call_id: event.payload.call_id,
            tool: "ask_user",
            arguments: { question: event.payload.question },
            question: event.payload.question,
            deadline_at: event.payload.deadline_at,
            decision: null,
            decided_by: null,
          }),
        );
        break;
      case "run.resumed": {
        const waited = this.approvals.get(event.payload.call_id);
        if (waited)
          out.push(this.approvalChunk({ ...waited, decision: event.payload.decision, decided_by: event.payload.by }));
        break;
      }
      default: {
        const state = stateOfTerminalEvent(event.type);
        if (state === null) break;
        this.ended = state;
        this.timing.finished_at = event.ts;
        this.closeStep(out);
        if (state !== "completed" && state !== "cancelled") {
          const error = (event.payload as { error?: { code?: string; message?: string } }).error;
          out.push({ type: "error", errorText: `job ${state}: ${error?.code ?? state}: ${error?.message ?? ""}` });
        }
      }
    }
    return out;
  }

  /** The chunks that close a finished answer, with the latency the API reports for it (null when unknown). */
  finish(latency: LatencyView | null): EarChunk[] {
    this.timing.latency = latency;
    const state = this.ended ?? undefined;
    return [
      this.timingChunk(),
      {
        type: "finish",
        finishReason: state === "completed" ? "stop" : state === "cancelled" ? "other" : "error",
        messageMetadata: { job_id: this.jobId, state, latency },
      },
    ];
  }

  private timingChunk(): EarChunk {
    return { type: "data-timing", id: `${this.jobId}:timing`, data: { ...this.timing } };
  }

  private approvalChunk(data: ApprovalData): EarChunk {
    this.approvals.set(data.call_id, data);
    return { type: "data-approval", id: `${this.jobId}:approval:${data.call_id}`, data };
  }

  private openStep(out: EarChunk[]): void {
    if (this.stepOpen) return;
    out.push({ type: "start-step" });
    this.stepOpen = true;
  }

  private closeText(out: EarChunk[]): void {
    if (this.textId === null) return;
    out.push({ type: "text-end", id: this.textId });
    this.textId = null;
  }

  private closeStep(out: EarChunk[]): void {
    this.closeText(out);
    if (!this.stepOpen) return;
    out.push({ type: "finish-step" });
    this.stepOpen = false;
  }
}

/**
 * The frames themselves: parsing what a client sent (bounded, schema-checked, with the reason a
 * frame is refused) and building the error and approval frames the session sends back. Pure:
 * no socket, no storage.
 */
import { type ClientFrame, ClientFrameSchema, type ServerFrame } from "../../../src/contracts/chat";
import type { WaitKind } from "../../../src/contracts/wait";
import { ASK_USER_TOOL } from "../../../src/domain/approval";

/** A frame is JSON of at most one message plus a little envelope. */
const MAX_FRAME_BYTES = 80 * 1024;

/** A client frame, or why it is not one (the `invalid_frame` message). */
export function parseFrame(message: string | ArrayBuffer): { frame: ClientFrame } | { invalid: string } {
  const text = typeof message === "string" ? message : new TextDecoder().decode(message);
  if (text.length > MAX_FRAME_BYTES) return { invalid: `frame larger than ${MAX_FRAME_BYTES} bytes` };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { invalid: "frame is not valid JSON" };
  }
  const parsed = ClientFrameSchema.safeParse(raw);
  if (parsed.success) return { frame: parsed.data };
  const issue = parsed.error.issues[0];
  const where = issue?.path.length ? `${issue.path.join(".")}: ` : "";
  return { invalid: `${where}${issue?.message ?? "invalid frame"}` };
}

export function mismatchFrame(clientMessageId: string) {
  return {
    ...errorFrame("idempotency_mismatch", "client_message_id was already used with different content"),
    client_message_id: clientMessageId,
  };
}

export function errorFrame(code: Extract<ServerFrame, { type: "error" }>["error"]["code"], message: string) {
  return { type: "error" as const, error: { code, message } };
}

/**
 * The `approval_request` frame for a `tool.approval_requested`, `input.requested` or
 * `budget.exhausted` event (null for any other): what a chat client needs to show the request and
 * answer it, in one frame. A budget wait's `tool` is the refused model and its `arguments` the
 * tree's spend and limit, as its `waiting_for` has them.
 */
export function approvalRequestFrame(jobId: string, e: { offset: number; type: string; body: string }): string | null {
  const wait = WAIT_OF_EVENT[e.type];
  if (!wait) return null;
  const { payload: p } = JSON.parse(e.body) as { payload: Record<string, unknown> };
  const frame: ServerFrame = {
    type: "approval_request",
    job_id: jobId,
    offset: e.offset,
    call_id: String(p.call_id),
    deadline_at: String(p.deadline_at),
    ...wait(p),
  };
  return JSON.stringify(frame);
}

/** Per event that asks a person: the frame's kind and what it shows (the rest is common). */
const WAIT_OF_EVENT: Record<
  string,
  | ((p: Record<string, unknown>) => { kind: WaitKind; tool: string; arguments: unknown; question: string | null })
  | undefined
> = {
  "tool.approval_requested": (p) => ({
    kind: "approval",
    tool: String(p.tool),
    arguments: p.arguments,
    question: null,
  }),
  "input.requested": (p) => ({
    kind: "input",
    tool: ASK_USER_TOOL,
    arguments: { question: p.question },
    question: String(p.question),
  }),
  "budget.exhausted": (p) => ({
    kind: "budget",
    tool: String(p.model ?? ""),
    arguments: { spent_usd: p.spent_usd, limit_usd: p.limit_usd },
    question: null,
  }),
};

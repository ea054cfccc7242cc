/**
 * The messages waiting behind the conversation's running job (the `queue` policy): at most
 * MAX_QUEUED_MESSAGES, in order, in storage. When the running job ends, the next one becomes the
 * next job; one that cannot be submitted is reported to every socket and the next is tried.
 */
import { MAX_QUEUED_MESSAGES } from "../../../src/contracts/chat";
import { ApiError } from "../../../src/contracts/errors";
import { log } from "../../log";
import { errorFrame } from "./frames";
import { submit } from "./job-submit";
import type { Session } from "./session";
import type { QueuedMessage } from "./session-store";
import { broadcast, send } from "./sockets";

/** Put `message` at the end of `queue` (as just read from the store), or tell `ws` the queue is full. */
export async function enqueue(
  s: Session,
  ws: WebSocket,
  queue: QueuedMessage[],
  message: QueuedMessage,
): Promise<void> {
  if (queue.length >= MAX_QUEUED_MESSAGES) {
    return send(ws, {
      ...errorFrame("queue_full", `at most ${MAX_QUEUED_MESSAGES} messages may wait behind a running job`),
      client_message_id: message.client_message_id,
    });
  }
  queue.push(message);
  await s.store.saveQueue(queue);
  broadcast(s.ctx, { type: "queued", client_message_id: message.client_message_id, position: queue.length });
}

/** The running job ended: the next queued message (if any) becomes the next job. */
export async function startNext(s: Session, jobId: string): Promise<void> {
  if ((await s.store.activeJob()) !== jobId) return;
  await s.store.clearActiveJob();
  const identity = await s.store.identity();
  for (;;) {
    const queue = await s.store.queue();
    const next = queue.shift();
    if (!next || !identity) return;
    await s.store.saveQueue(queue);
    try {
      await submit(s, identity, next);
      return;
    } catch (err) {
      log.warn("queued chat message could not be submitted", { error: err });
      // A refusal of the message itself (its agent was archived while it waited, say, or the
      // tenant's budget was spent) is told as such; anything else is the dependency that
      // failed, and sending again may work.
      const refused =
        err instanceof ApiError &&
        (err.code === "invalid_request" || err.code === "conflict" || err.code === "budget_exceeded");
      broadcast(s.ctx, {
        ...(refused
          ? errorFrame(err.code as "invalid_request" | "conflict" | "budget_exceeded", err.message)
          : errorFrame("dependency_unavailable", "the queued message could not be submitted; send it again")),
        client_message_id: next.client_message_id,
        ...(refused && err.retryAfterS !== undefined ? { retry_after_s: err.retryAfterS } : {}),
      });
    }
  }
}

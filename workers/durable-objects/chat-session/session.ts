/**
 * What the session's parts share, built once by ChatSessionObject: the object's state and
 * bindings, its backend, its store, and the one step that closes a loop between parts (a job's
 * terminal event, seen by the delivery, starts the next queued message, whose submit delivers
 * again). Reached through this context instead of an import, so the parts import one another in
 * one direction only.
 */
import type { Env } from "../../env";
import type { ChatBackend } from "./chat-backend";
import type { SessionStore } from "./session-store";

export interface Session {
  readonly ctx: DurableObjectState;
  readonly env: Env;
  /** The object's backend, read at each call: tests replace it on a live instance. */
  backend(): ChatBackend;
  readonly store: SessionStore;
  /** The relayed job `jobId` just ended (message-queue.ts). */
  jobFinished(jobId: string): Promise<void>;
}

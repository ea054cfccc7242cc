/**
 * The three Durable Objects as their callers see them: the RPC methods each class implements
 * (`implements JobEventsRpc`, …). workers/env.ts types the namespaces with these interfaces, not
 * with the classes: the bindings are read by nearly every module and the classes import nearly
 * every module, so typing them by the classes closed an import cycle through env.ts (17 files;
 * test/unit/layering.test.ts now refuses any cycle in workers/). This module imports types only,
 * and only from src/ and the event log's row shape.
 */
import type { IngestBatch } from "../../src/contracts/events";
import type { IngestRejection, LoggedEvent, ProjectorAck } from "./job-events/event-log";

/** Why a batch was refused before the log saw it: its ownership, or Postgres could not be asked. */
export type TrustRejection = "unknown_execution" | "wrong_epoch" | "bad_mac" | "terminal_disagrees" | "unavailable";

export type IngestResult =
  | { ok: true; ack: ProjectorAck }
  | { ok: false; reason: IngestRejection | TrustRejection; message: string };

/** Why a batch was not written: what the object's parts answer when they refuse one. */
export type IngestRefusal = Extract<IngestResult, { ok: false }>;

/** A page of the log, as RPC hands it to consumers that poll (tests, the chat relay). */
export interface LogPage {
  events: Array<{ offset: number; type: string; body: string }>;
  finished: boolean;
}

/** One job's projector (`idFromName(job_id)`); its `fetch` serves the job's SSE stream. */
export interface JobEventsRpc extends Rpc.DurableObjectBranded {
  ingest(batch: IngestBatch, nonce: string, eventsJson: string): Promise<IngestResult>;
  readAfter(offset: number, limit?: number): Promise<Array<{ offset: number; type: string; event: unknown }>>;
  page(offset: number, limit: number): Promise<LogPage>;
  watch(jobId: string, chatName: string): Promise<{ finished: boolean; lastOffset: number }>;
}

/** One conversation's session (`idFromName(tenant:conversation)`); its `fetch` takes the WebSocket upgrade. */
export interface ChatSessionRpc extends Rpc.DurableObjectBranded {
  relay(jobId: string, events: LoggedEvent[]): Promise<void>;
}

export type StreamKind = "sse" | "ws";

export type AcquireResult = { ok: true } | { ok: false; open: number };

/** `acquireMany`'s answer: the ids that got a slot (in the request's order), and the count after. */
export interface AcquireManyResult {
  granted: string[];
  open: number;
}

/** One tenant's open-stream counter (`idFromName(tenant_id)`). */
export interface TenantStreamsRpc extends Rpc.DurableObjectBranded {
  acquire(id: string, kind: StreamKind, cap: number, ttlMs?: number): Promise<AcquireResult>;
  acquireMany(ids: string[], kind: StreamKind, cap: number, ttlMs?: number): Promise<AcquireManyResult>;
  renew(ids: string[], ttlMs?: number): Promise<void>;
  release(ids: string[]): Promise<void>;
  count(): Promise<Record<StreamKind, number>>;
}

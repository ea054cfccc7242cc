/**
 * The fetch a run's MCP transport (the SDK's StreamableHTTPClientTransport) makes every request
 * with. It is where the host enforces what the SDK cannot know:
 * - the operator's MCP_ALLOWED_URLS on every hop: the SDK follows same-origin redirects by
 *   calling this fetch again with the target (and this fetch never lets the runtime follow one
 *   itself), so a server at an allowed URL answering `307 Location: /admin/mcp` cannot carry the
 *   run's requests, secret headers included, to a path the operator did not allow;
 * - the per-call fencing header the transport cannot set: the idempotency key, copied from the
 *   tools/call request's `_meta`;
 * - a cancellation notice's own deadline instead of the transport's signal: the run closes the
 *   client right after cancelling, and that must not abort the notice on its way to the server;
 * - a byte bound on what is read of each answer, enforced while reading: the SDK reads a JSON
 *   body whole and an SSE event whole before the toolset can cut a result to what the model
 *   gets, so a 30 MB result cost the host 180 MB of memory, shared by every run on it. Past
 *   MCP_MESSAGE_MAX_BYTES the host stops reading: a JSON answer fails with McpResponseTooLarge,
 *   an SSE answer to a request ends with a JSON-RPC error for it (the SDK then rejects the call
 *   at once instead of waiting out its timeout), and an over-long event on the session's GET
 *   stream is dropped. An error page is cut at the bound (its text is only a message).
 */

import type { McpServer } from "../../src/contracts/agent";
import { type AllowedUrl, isUrlAllowed, MCP_FENCING_HEADERS, MCP_FENCING_META } from "../../src/domain/mcp";
import { activeTraceparent } from "../tracing/spans";

/** How long a `notifications/cancelled` may take to reach the server (it must outlive the client's close). */
export const CANCEL_NOTICE_MS = 5000;

/**
 * The most bytes of one MCP message the host reads: a JSON body, or one SSE event. 64 times what
 * the model is shown of a result (MCP_RESULT_MAX_CHARS), so a result that is merely long is
 * still read and then truncated; what is bigger is not worth the host's memory.
 */
export const MCP_MESSAGE_MAX_BYTES = 4 * 1024 * 1024;

/** The JSON-RPC error code of the answer the host writes in place of an over-long SSE message. */
export const MCP_TOO_LARGE_CODE = -32090;

export const tooLargeMessage = (server: string): string =>
  `MCP server "${server}" answered more than ${MCP_MESSAGE_MAX_BYTES} bytes in one message; the host stopped reading it`;

/** An answer whose body passed MCP_MESSAGE_MAX_BYTES: reading stopped there. */
export class McpResponseTooLarge extends Error {
  override readonly name = "McpResponseTooLarge";
}

/** A request (a redirect's target) outside MCP_ALLOWED_URLS: never sent. */
export class McpUrlRefused extends Error {
  override readonly name = "McpUrlRefused";
}

type JsonRpcMessage = { id?: unknown; method?: unknown; params?: { _meta?: Record<string, unknown> } };

export function mcpTransportFetch(server: McpServer, allowedUrls: readonly AllowedUrl[]): typeof fetch {
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (!isUrlAllowed(url.href, allowedUrls)) {
      // Named without query or fragment (the server chose them; they are not the tenant's to read).
      throw new McpUrlRefused(
        `MCP server "${server.name}" redirected to ${url.origin}${url.pathname}, which is not a URL the operator allows MCP calls to (MCP_ALLOWED_URLS): not followed`,
      );
    }
    // The SDK follows a redirect it accepts by calling this function again (checked above); a
    // redirect the runtime followed by itself would skip that check.
    let next: RequestInit = { ...init, redirect: "manual" };
    const message = init?.method === "POST" && typeof init.body === "string" ? parseMessage(init.body) : null;
    if (message?.method === "tools/call") {
      const key = message.params?._meta?.[MCP_FENCING_META.idempotencyKey];
      // The tool call's span (active here: the SDK sends from within the call), so the server's
      // own spans join the run's trace. Absent with tracing off: no span records.
      const traceparent = activeTraceparent();
      if (typeof key === "string" || traceparent !== null) {
        const headers = new Headers(init?.headers);
        if (typeof key === "string") headers.set(MCP_FENCING_HEADERS.idempotencyKey, key);
        if (traceparent !== null) headers.set("traceparent", traceparent);
        next = { ...next, headers };
      }
    }
    if (message?.method === "notifications/cancelled") {
      next = { ...next, signal: AbortSignal.timeout(CANCEL_NOTICE_MS) };
    }
    const response = await fetch(input, next);
    const id = typeof message?.id === "string" || typeof message?.id === "number" ? message.id : undefined;
    return capped(response, server.name, id);
  };
}

/** The statuses whose body the SDK reads (a redirect's, a 202's or a 204's it only discards). */
const readBody = (status: number) => status !== 202 && status !== 204 && (status < 300 || status >= 400);

/** `response` with its body read at most MCP_MESSAGE_MAX_BYTES per message (see the file's comment). */
function capped(response: Response, server: string, requestId: string | number | undefined): Response {
  if (response.body === null || !readBody(response.status)) return response;
  const type = (response.headers.get("content-type") ?? "").split(";", 1)[0]?.trim().toLowerCase();
  const sse = response.ok && type === "text/event-stream";
  const upstream = response.body.getReader();
  const messageBytes = sse ? sseMessageBytes() : counter();
  /** Set while an over-long event of a GET stream is being skipped, until its end. */
  let skipping = false;
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        // A pull that enqueues nothing is not called again: read on while an event is skipped.
        let chunk = await upstream.read();
        let bytes = chunk.done ? null : messageBytes(chunk.value);
        while (skipping && !chunk.done && bytes?.resumeAt === null) {
          chunk = await upstream.read();
          bytes = chunk.done ? null : messageBytes(chunk.value);
        }
        if (chunk.done || bytes === null) {
          controller.close();
          return;
        }
        const value = chunk.value;
        const { pending, resumeAt } = bytes;
        if (skipping) {
          skipping = false;
          controller.enqueue(value.subarray(resumeAt ?? value.length));
          return;
        }
        if (pending <= MCP_MESSAGE_MAX_BYTES) {
          controller.enqueue(value);
          return;
        }
        if (!response.ok) {
          // An error page: its first MCP_MESSAGE_MAX_BYTES are the message; the rest is not read.
          controller.enqueue(value.subarray(0, value.length - (pending - MCP_MESSAGE_MAX_BYTES)));
          controller.close();
          await upstream.cancel();
          return;
        }
        if (!sse) {
          controller.error(new McpResponseTooLarge(tooLargeMessage(server)));
          await upstream.cancel();
          return;
        }
        // What of the event was passed on ends here (the SDK drops it as unparseable).
        controller.enqueue(ENCODER.encode("\n\n"));
        if (requestId === undefined) {
          skipping = resumeAt === null;
          if (resumeAt !== null) controller.enqueue(value.subarray(resumeAt));
          return;
        }
        const answer = {
          jsonrpc: "2.0",
          id: requestId,
          error: { code: MCP_TOO_LARGE_CODE, message: tooLargeMessage(server) },
        };
        controller.enqueue(ENCODER.encode(`event: message\ndata: ${JSON.stringify(answer)}\n\n`));
        controller.close();
        await upstream.cancel();
      },
      cancel(reason) {
        return upstream.cancel(reason);
      },
    },
    // Read only what the SDK asks for: nothing ahead of it.
    { highWaterMark: 0 },
  );
  const wrapped = new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
  // The SDK names a redirect's target relative to the response's URL.
  Object.defineProperty(wrapped, "url", { value: response.url });
  return wrapped;
}

const ENCODER = new TextEncoder();

/**
 * For a body that is one message: after each chunk, the bytes read so far (`resumeAt` is never
 * set: the message only ends with the body).
 */
function counter(): (chunk: Uint8Array) => { pending: number; resumeAt: number | null } {
  let total = 0;
  return (chunk) => {
    total += chunk.length;
    return { pending: total, resumeAt: null };
  };
}

/**
 * For an SSE stream: after each chunk, the size of the longest event in it, counting an event
 * begun in earlier chunks and one still unfinished at its end (`pending`), and where the first
 * event boundary (a blank line: CRLF, LF or CR line ends) ended the event the chunk began in
 * (`resumeAt`, the next event's start; null: no boundary in this chunk).
 */
function sseMessageBytes(): (chunk: Uint8Array) => { pending: number; resumeAt: number | null } {
  /** Bytes of the unfinished event before the next chunk. */
  let carried = 0;
  /** The previous byte ended a line; `cr`: it was a CR (a following LF belongs to it). */
  let lineEnded = false;
  let cr = false;
  return (chunk) => {
    let resumeAt: number | null = null;
    // Where the current event began, relative to this chunk (negative: in an earlier one).
    let start = -carried;
    let longest = 0;
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i];
      if (b === 0x0a && cr) {
        cr = false;
        // The LF of a CRLF that ended an event belongs to that event.
        if (start === i) start = i + 1;
        if (resumeAt === i) resumeAt = i + 1;
        continue;
      }
      cr = b === 0x0d;
      if (b === 0x0a || b === 0x0d) {
        if (lineEnded) {
          longest = Math.max(longest, i + 1 - start);
          start = i + 1;
          resumeAt ??= start;
        }
        lineEnded = true;
      } else {
        lineEnded = false;
      }
    }
    carried = chunk.length - start;
    return { pending: Math.max(longest, carried), resumeAt };
  };
}

function parseMessage(body: string): JsonRpcMessage | null {
  try {
    return JSON.parse(body) as JsonRpcMessage | null;
  } catch {
    return null;
  }
}

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
 *   client right after cancelling, and that must not abort the notice on its way to the server.
 */
import type { McpServer } from "../../src/contracts/agent";
import { type AllowedUrl, isUrlAllowed, MCP_FENCING_HEADERS, MCP_FENCING_META } from "../../src/domain/mcp";

/** How long a `notifications/cancelled` may take to reach the server (it must outlive the client's close). */
export const CANCEL_NOTICE_MS = 5000;

/** A request (a redirect's target) outside MCP_ALLOWED_URLS: never sent. */
export class McpUrlRefused extends Error {
  override readonly name = "McpUrlRefused";
}

type JsonRpcMessage = { method?: unknown; params?: { _meta?: Record<string, unknown> } };

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
      if (typeof key === "string") {
        const headers = new Headers(init?.headers);
        headers.set(MCP_FENCING_HEADERS.idempotencyKey, key);
        next = { ...next, headers };
      }
    }
    if (message?.method === "notifications/cancelled") {
      next = { ...next, signal: AbortSignal.timeout(CANCEL_NOTICE_MS) };
    }
    return fetch(input, next);
  };
}

function parseMessage(body: string): JsonRpcMessage | null {
  try {
    return JSON.parse(body) as JsonRpcMessage | null;
  } catch {
    return null;
  }
}

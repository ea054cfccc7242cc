/**
 * How the gateway reaches a conversation's session: the object's name and the headers the
 * upgrade request carries (routes/conversations.ts sets them after authenticating). Its own
 * module so the route needs nothing of the object but this.
 */

export const CHAT_HEADERS = {
  tenant: "x-ear-tenant",
  conversation: "x-ear-conversation",
  multitask: "x-ear-multitask",
  /** The connection's default agent reference (`?agent=`), checked for form by the gateway. */
  agent: "x-ear-agent",
  /** The tenant's open-stream cap (SSE + WebSockets), from the gateway's configuration. */
  streamCap: "x-ear-stream-cap",
  /** SHA-256 of the API key that opened the socket (a token's minting key): its frames count against its rate. */
  keyHash: "x-ear-key-hash",
} as const;

/** One object per tenant + conversation; tenant ids cannot contain ":", so no other tenant can name it. */
export function chatSessionName(tenantId: string, conversationId: string): string {
  return `${tenantId}:${conversationId}`;
}

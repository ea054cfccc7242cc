/**
 * Access tokens' plain facts, without zod: the client (and so the browser console's bundle)
 * reads these, and the schemas in tokens.ts are built from them. A token is what a browser holds
 * instead of an API key (docs/api.md, "Tokens").
 */

/** `read`: GET routes only (the SSE stream included). `write`: every route but minting tokens. */
export const TOKEN_SCOPES = ["read", "write"] as const;
export type TokenScope = (typeof TOKEN_SCOPES)[number];

export const TOKEN_TTL = {
  /** A browser session refreshes its token this often; short enough that a leaked URL soon stops working. */
  defaultS: 15 * 60,
  /** A token outlives the revocation of the key that minted it by at most this long. */
  maxS: 24 * 3600,
} as const;

/**
 * The query parameter a token travels in where no header can be set (EventSource, WebSocket);
 * accepted on the SSE and WebSocket routes only, and never for an API key.
 */
export const ACCESS_TOKEN_PARAM = "access_token";

/** A JWT's shape: three base64url parts. API keys (`ear_…`) never have a dot. */
export function looksLikeAccessToken(credential: string): boolean {
  return /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(credential);
}

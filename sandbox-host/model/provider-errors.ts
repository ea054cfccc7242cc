/**
 * What a provider's error response may tell a tenant, and what it tells the retry loop. A
 * provider's message is written for the operator who holds the key: it can quote the key's
 * prefix, the upstream URL or a gateway's internal host name. The tenant gets the gist (why the
 * request was refused) with those removed and a bounded length.
 */

/** The longest provider message a job error carries. */
export const MAX_PROVIDER_MESSAGE_CHARS = 300;

const opaqueToken = (token: string) => (/\d/.test(token) && /[A-Za-z]/.test(token) ? "[redacted]" : token);

const REDACTIONS: Array<[RegExp, string | ((match: string) => string)]> = [
  // URLs first, so their host names go with them.
  [/\b[a-z][a-z0-9+.-]*:\/\/\S+/gi, "[url]"],
  // Bearer tokens and API-key shapes (sk-…, key-…, long opaque tokens).
  [/\bbearer\s+\S+/gi, "[redacted]"],
  [/\b(?:sk|pk|rk|key|api[-_]?key)[-_][A-Za-z0-9_-]{6,}/gi, "[redacted]"],
  // Long runs of letters and digits mixed: a key, a token, a signature.
  [/\b[A-Za-z0-9_-]{24,}\b/g, opaqueToken],
  // IPv4 (with a port) and IPv6-looking addresses.
  [/\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b/g, "[host]"],
  [/\[[0-9a-f]*:[0-9a-f]*:[0-9a-f:]*\](?::\d+)?/gi, "[host]"],
  // Host names: three or more labels (each with a letter), or two ending in a common or internal
  // top-level name, or any name with a port. Not any `a.b`: a 400's own words name fields like
  // `messages[0].content` or `tools.0.type`.
  [/\b(?:[a-z0-9-]*[a-z][a-z0-9-]*\.){2,}[a-z][a-z0-9-]*\b(?::\d+)?/gi, "[host]"],
  [
    /\b[a-z0-9-]+\.(?:com|net|org|io|ai|dev|app|cloud|co|internal|local|localdomain|lan|svc|corp|home|arpa)\b(?::\d+)?/gi,
    "[host]",
  ],
  [/\b[a-z0-9.-]+:\d{2,5}\b/gi, "[host]"],
];

/** A provider's message as a tenant may read it: URLs, keys and host names removed, truncated. */
export function safeProviderMessage(message: string): string {
  let out = message.replace(/\s+/g, " ").trim();
  for (const [re, replacement] of REDACTIONS) {
    out = typeof replacement === "string" ? out.replace(re, replacement) : out.replace(re, replacement);
  }
  if (out.length > MAX_PROVIDER_MESSAGE_CHARS) out = `${out.slice(0, MAX_PROVIDER_MESSAGE_CHARS - 1)}…`;
  return out;
}

/** The longest Retry-After honoured; anything longer is read as this (the retry budget decides). */
const MAX_RETRY_AFTER_MS = 24 * 3_600_000;

/**
 * The wait a response asks for: `retry-after-ms` (OpenAI's, milliseconds) or `Retry-After`
 * (RFC 9110: delay-seconds or an HTTP date). Null when absent or unreadable.
 */
export function retryAfterMs(
  headers: { get(name: string): string | null } | undefined,
  now = Date.now(),
): number | null {
  if (!headers) return null;
  const ms = headers.get("retry-after-ms")?.trim();
  if (ms && /^\d+(\.\d+)?$/.test(ms)) return Math.min(MAX_RETRY_AFTER_MS, Math.round(Number(ms)));
  const value = headers.get("retry-after")?.trim();
  if (!value) return null;
  if (/^\d+$/.test(value)) return Math.min(MAX_RETRY_AFTER_MS, Number(value) * 1000);
  const at = Date.parse(value);
  if (Number.isNaN(at)) return null;
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(0, at - now));
}

/**
 * The shape every URL a tenant gives the runtime to call must have (a webhook endpoint, an MCP
 * server): http(s), and no credentials in it. Credentials in a URL (`https://user:pw@host/`) are
 * stored and shown back on every read of the definition, logged wherever the URL is, and sent
 * by a host to a server the operator allowed by its origin only; a secret belongs in a header
 * (MCP's `headers`) or the endpoint's signing secret, never in the URL. Where the URL may point
 * (the operator's allowlists) is src/domain/mcp.ts, `isUrlAllowed`, which refuses credentials too.
 */
import { text } from "./text";

export const HTTP_URL_MESSAGE = "must be an http(s) URL without credentials (user:password@)";

/** http(s), parseable, and with neither a user name nor a password. */
export function isHttpUrlWithoutCredentials(raw: string): boolean {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return false;
  }
  return (url.protocol === "https:" || url.protocol === "http:") && url.username === "" && url.password === "";
}

/** A request field holding such a URL, at most `maxChars` long. */
export const httpUrl = (maxChars: number) =>
  text().min(1).max(maxChars).refine(isHttpUrlWithoutCredentials, { message: HTTP_URL_MESSAGE });

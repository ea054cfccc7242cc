/**
 * The team's server side of the example: it holds the API key and gives the page a short-lived,
 * conversation-bound `write` token (POST /v1/tokens), the only credential the page ever sees. A
 * Web-standard handler (Request → Response), so the same function is a Next.js route handler
 * (docs/api.md "A page's token from your server"), the Vite dev server's `/api/token` here
 * (vite.config.ts) and the browser test's page server.
 *
 * Before minting, a real server checks that its signed-in user may use that conversation or job
 * (the ids are the page's): the token opens exactly one, and this route decides whose.
 */
export interface TokenServerEnv {
  /** The gateway's origin, e.g. https://api.example.com. */
  gatewayUrl: string;
  /** The team's API key: never sent to the page. */
  apiKey: string;
  /** Token lifetime (default 900 s); the page asks again before it runs out. */
  ttlS?: number;
}

/** What the page gets: the token, when it expires, and where the gateway is. */
export interface PageToken {
  token: string;
  expires_at: string;
  base_url: string;
}

/**
 * `GET …?conversation=<id>` → a `write` token for that conversation (the chat), `GET …?job=<id>`
 * → a `read` token for that job (the run details, useJob); answered `{token, expires_at,
 * base_url}`. The gateway's own 4xx passes through.
 */
export async function handleTokenRequest(request: Request, env: TokenServerEnv): Promise<Response> {
  const query = new URL(request.url).searchParams;
  const conversation = query.get("conversation");
  const job = query.get("job");
  const binding = conversation
    ? { scope: "write", conversation_id: conversation }
    : job
      ? { scope: "read", job_id: job }
      : null;
  if (!binding) return Response.json({ error: "conversation or job is required" }, { status: 400 });
  const res = await fetch(`${env.gatewayUrl.replace(/\/+$/, "")}/v1/tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${env.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ ...binding, ttl_s: env.ttlS ?? 900 }),
  });
  if (!res.ok)
    return new Response(await res.text(), { status: res.status, headers: { "content-type": "application/json" } });
  const minted = (await res.json()) as { token: string; expires_at: string };
  const body: PageToken = { token: minted.token, expires_at: minted.expires_at, base_url: env.gatewayUrl };
  return Response.json(body, { headers: { "cache-control": "no-store" } });
}

/**
 * The team's backend: it alone holds the API key. It gives the page a short-lived token bound to
 * one conversation (the only credential the page sees) and decides the tool calls that wait for
 * approval by the team's own policy. `handle` is a Web-standard handler (Request → Response), so
 * the same function is a Next.js route handler, a Worker, or the Node server at the bottom.
 *
 *   POST /api/token            {conversation_id}            → {token, expires_at, base_url}
 *   POST /api/approvals        {job_id, call_id, decision?} → the recorded decision
 *
 * A real backend checks first that its signed-in user may use that conversation: the token
 * opens exactly one, and this route decides whose.
 */
import { createServer } from "node:http";
import { ApiClientError, EarClient } from "edge-agent-runtime/client";

export interface BackendEnv {
  /** The gateway's origin, e.g. https://api.example.com. */
  gatewayUrl: string;
  /** The team's API key: never sent to the page. */
  apiKey: string;
}

/** Refunds up to this many US dollars are approved without a person. */
const AUTO_APPROVE_REFUND_USD = 100;

export async function handle(request: Request, env: BackendEnv): Promise<Response> {
  const ear = new EarClient({ baseUrl: env.gatewayUrl, credential: env.apiKey });
  const path = new URL(request.url).pathname;
  try {
    if (request.method === "POST" && path === "/api/token") {
      const { conversation_id } = (await request.json()) as { conversation_id?: string };
      if (!conversation_id) return Response.json({ error: "conversation_id is required" }, { status: 400 });
      const minted = await ear.createToken({ scope: "write", conversation_id, ttl_s: 900 });
      return Response.json(
        { token: minted.token, expires_at: minted.expires_at, base_url: env.gatewayUrl },
        { headers: { "cache-control": "no-store" } },
      );
    }
    if (request.method === "POST" && path === "/api/approvals") {
      const body = (await request.json()) as { job_id: string; call_id: string; total_usd?: number };
      // The team's policy: small refunds pass, the rest are denied with a note the model reads.
      const small = (body.total_usd ?? Number.POSITIVE_INFINITY) <= AUTO_APPROVE_REFUND_USD;
      const answer = await ear.decide(body.job_id, body.call_id, {
        decision: small ? "approve" : "deny",
        note: small ? "within the automatic refund limit" : "over the automatic limit: a person will follow up",
      });
      return Response.json(answer);
    }
    return Response.json({ error: "not found" }, { status: 404 });
  } catch (err) {
    if (err instanceof ApiClientError) return Response.json({ error: err.message }, { status: err.status });
    throw err;
  }
}

/** `npm run backend`: the handler on Node's HTTP server (EAR_URL, EAR_API_KEY, PORT). */
async function main(): Promise<void> {
  const env = { gatewayUrl: process.env.EAR_URL ?? "", apiKey: process.env.EAR_API_KEY ?? "" };
  if (!env.gatewayUrl || !env.apiKey) throw new Error("set EAR_URL and EAR_API_KEY");
  const port = Number(process.env.PORT ?? 8788);
  createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const request = new Request(`http://backend${req.url ?? "/"}`, {
      method: req.method,
      headers: { "content-type": req.headers["content-type"] ?? "application/json" },
      ...(req.method === "GET" || req.method === "HEAD" ? {} : { body: Buffer.concat(chunks) }),
    });
    const answer = await handle(request, env).catch((err: unknown) =>
      Response.json({ error: String(err) }, { status: 502 }),
    );
    res.writeHead(answer.status, Object.fromEntries(answer.headers));
    res.end(await answer.text());
  }).listen(port, () => console.log(`backend on http://127.0.0.1:${port}`));
}

if (import.meta.url === `file://${process.argv[1]}`) await main();

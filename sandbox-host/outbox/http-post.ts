/**
 * The outbox's transport: one POST over node:http(s) with a keep-alive agent. Why not fetch: a
 * host sends an ingest request per flush, which for a lone run streaming 50 tokens/s is one per
 * model delta (~90 per run), and undici's fetch costs several times node:http per request
 * (WHATWG Request/Response objects, a body stream and its tee, an AbortSignal per request):
 * measured on this machine, a 1.5 KB POST and its JSON answer over loopback took 0.5–1.1 ms of
 * CPU through fetch and 0.08–0.25 ms through http.request (client and server in one process).
 * `bench:host` shows the difference per run (docs/capacity.md, "The cost of one run").
 */
import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";

export interface HttpPoster {
  post(
    url: URL,
    headers: Record<string, string>,
    body: string,
    timeoutMs: number,
  ): Promise<{ status: number; text: string }>;
  /** Closes the idle keep-alive sockets. */
  close(): void;
}

export function createHttpPoster(): HttpPoster {
  const http = new HttpAgent({ keepAlive: true });
  const https = new HttpsAgent({ keepAlive: true });
  return {
    post(url, headers, body, timeoutMs) {
      return new Promise((resolve, reject) => {
        const tls = url.protocol === "https:";
        const send = tls ? httpsRequest : httpRequest;
        let timer: NodeJS.Timeout | undefined;
        const fail = (err: Error) => {
          clearTimeout(timer);
          reject(err);
        };
        const req = send(
          url,
          {
            method: "POST",
            agent: tls ? https : http,
            headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("error", fail);
            res.on("end", () => {
              clearTimeout(timer);
              resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") });
            });
          },
        );
        timer = setTimeout(() => req.destroy(new Error(`the request took over ${timeoutMs} ms`)), timeoutMs);
        req.on("error", fail);
        req.end(body);
      });
    },
    close() {
      http.destroy();
      https.destroy();
    },
  };
}

/**
 * A second OpenAI-compatible provider for tests, separate from the mock model on purpose: it
 * records every chat-completions request exactly as received (body and headers), answers what
 * the test scripts per request (streamed text, tool calls, a usage chunk or none, an HTTP error
 * with headers, a connection cut mid-stream, a hold until the test releases it), and counts
 * requests in flight, so a test can prove what reached the provider and how many at once.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

export interface ProviderRequest {
  // biome-ignore lint/suspicious/noExplicitAny: the wire body is whatever the client sent.
  body: any;
  headers: IncomingHttpHeaders;
  /** Date.now() at arrival. */
  at: number;
}

export type ProviderReply =
  | {
      kind: "stream";
      /** Text pieces, one chunk each. */
      pieces?: string[];
      toolCalls?: Array<{ id: string; name: string; args: unknown }>;
      /** The usage chunk; null: none sent (as some providers do). */
      usage?: { prompt_tokens: number; completion_tokens: number } | null;
      /** Wait before the first chunk (headers go out at once). */
      holdMs?: number;
      /** Wait for this promise before the first chunk. */
      until?: Promise<unknown>;
      /** Cut the connection after this many pieces, without a finish reason. */
      cutAfter?: number;
    }
  | { kind: "error"; status: number; message: string; headers?: Record<string, string> };

export type ProviderScript = (req: ProviderRequest, n: number) => ProviderReply;

export interface FakeProvider {
  /** Base URL ending in /v1. */
  url: string;
  requests: ProviderRequest[];
  inFlight: number;
  maxInFlight: number;
  script: ProviderScript;
  /** Sorts streamed requests into groups (e.g. by tenant) whose peaks `peakBy` keeps. */
  classify: (req: ProviderRequest) => string;
  /** The most streamed requests of each group in flight at once. */
  peakBy: Map<string, number>;
  /** Forget the recorded requests and the concurrency peaks. */
  reset(): void;
  close(): Promise<void>;
}

const textReply = (text: string): ProviderReply => ({
  kind: "stream",
  pieces: text.split(/(?<= )/),
  usage: { prompt_tokens: 10, completion_tokens: 5 },
});

export async function startFakeProvider(script: ProviderScript = () => textReply("ok")): Promise<FakeProvider> {
  const provider: FakeProvider = {
    url: "",
    requests: [],
    inFlight: 0,
    maxInFlight: 0,
    script,
    classify: () => "",
    peakBy: new Map(),
    reset() {
      provider.requests = [];
      provider.maxInFlight = provider.inFlight;
      provider.peakBy = new Map();
    },
    close: async () => {},
  };

  const groups = new Map<string, number>();

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== "POST" || !req.url?.endsWith("/chat/completions")) {
      res.writeHead(404).end();
      return;
    }
    const parts: Buffer[] = [];
    for await (const p of req) parts.push(p as Buffer);
    const recorded: ProviderRequest = {
      body: JSON.parse(Buffer.concat(parts).toString("utf8")),
      headers: req.headers,
      at: Date.now(),
    };
    provider.requests.push(recorded);
    const reply = provider.script(recorded, provider.requests.length);
    if (reply.kind === "error") {
      res.writeHead(reply.status, { "content-type": "application/json", ...reply.headers });
      res.end(JSON.stringify({ error: { message: reply.message, type: "invalid_request_error", code: null } }));
      return;
    }
    provider.inFlight++;
    provider.maxInFlight = Math.max(provider.maxInFlight, provider.inFlight);
    const group = provider.classify(recorded);
    groups.set(group, (groups.get(group) ?? 0) + 1);
    provider.peakBy.set(group, Math.max(provider.peakBy.get(group) ?? 0, groups.get(group) ?? 0));
    try {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      res.flushHeaders();
      if (reply.holdMs) await sleep(reply.holdMs);
      if (reply.until) await reply.until;
      const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
        `data: ${JSON.stringify({
          id: "chatcmpl-fake",
          object: "chat.completion.chunk",
          created: 0,
          model: recorded.body.model,
          choices: [{ index: 0, delta, finish_reason: finish }],
        })}\n\n`;
      const pieces = reply.pieces ?? [];
      for (let i = 0; i < pieces.length; i++) {
        if (reply.cutAfter !== undefined && i >= reply.cutAfter) break;
        res.write(chunk(i === 0 ? { role: "assistant", content: pieces[i] } : { content: pieces[i] }));
        await sleep(5);
      }
      if (reply.cutAfter !== undefined) {
        // A provider dying mid-answer: what was written is flushed, then the socket is gone.
        res.socket?.end();
        return;
      }
      (reply.toolCalls ?? []).forEach((c, index) => {
        res.write(
          chunk({
            tool_calls: [
              { index, id: c.id, type: "function", function: { name: c.name, arguments: JSON.stringify(c.args) } },
            ],
          }),
        );
      });
      res.write(chunk({}, reply.toolCalls?.length ? "tool_calls" : "stop"));
      if (reply.usage !== null) {
        const usage = reply.usage ?? { prompt_tokens: 10, completion_tokens: 5 };
        res.write(
          `data: ${JSON.stringify({
            id: "chatcmpl-fake",
            object: "chat.completion.chunk",
            created: 0,
            model: recorded.body.model,
            choices: [],
            usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
          })}\n\n`,
        );
      }
      res.end("data: [DONE]\n\n");
    } finally {
      provider.inFlight--;
      groups.set(group, (groups.get(group) ?? 1) - 1);
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  provider.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  provider.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return provider;
}

export { textReply };

/**
 * WebSocket chat end to end through the real stack (wrangler dev, Postgres, Redis, a host, the
 * mock model): a message becomes a job whose events stream back; a second message while the first
 * runs is queued and runs after it, with the history as its input; a reconnect + resume replays
 * exactly what was missed; the conversation's history comes back with each answer's latency.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { EarClient } from "../../src/client/client";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient } from "../helpers/api";
import { testPool } from "../helpers/db";
import { requireBinary } from "../helpers/require";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

type Frame = { type: string; [k: string]: unknown } & {
  job?: { id: string; state: string; conversation_id: string | null };
  offset?: number;
  event?: { type: string; job_id: string; payload: Record<string, unknown> };
  client_message_id?: string;
};

class Chat {
  private readonly frames: Frame[] = [];
  private wake: (() => void) | undefined;
  closed = false;

  private constructor(readonly ws: WebSocket) {
    ws.on("message", (data) => {
      this.frames.push(JSON.parse(String(data)) as Frame);
      this.wake?.();
    });
    ws.on("close", () => {
      this.closed = true;
      this.wake?.();
    });
  }

  static open(url: string): Promise<Chat> {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    return new Promise((resolve, reject) => {
      ws.once("open", () => resolve(new Chat(ws)));
      ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade refused: HTTP ${res.statusCode}`)));
      ws.once("error", reject);
    });
  }

  send(frame: unknown): void {
    this.ws.send(JSON.stringify(frame));
  }

  async next(timeoutMs = 20_000): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const f = this.frames.shift();
      if (f) return f;
      if (this.closed) throw new Error("socket closed");
      if (Date.now() > deadline) throw new Error("timed out waiting for a frame");
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.max(1, deadline - Date.now()));
        this.wake = () => {
          clearTimeout(t);
          r();
        };
      });
    }
  }

  async until(match: (f: Frame) => boolean, timeoutMs = 20_000): Promise<Frame[]> {
    const out: Frame[] = [];
    for (;;) {
      const f = await this.next(timeoutMs);
      out.push(f);
      if (match(f)) return out;
    }
  }

  close(): Promise<void> {
    return new Promise((r) => {
      if (this.closed) return r();
      this.ws.once("close", () => r());
      this.ws.close(1000);
    });
  }
}

const TERMINAL = ["run.completed", "run.failed", "run.cancelled", "run.lost", "run.timed_out"];
const isTerminal = (f: Frame) => f.type === "event" && TERMINAL.includes(f.event?.type ?? "");
const textOf = (frames: Frame[]) =>
  frames
    .filter((f) => f.event?.type === "model.delta")
    .map((f) => String(f.event?.payload.text ?? ""))
    .join("");

describe.skipIf(!canRun)("WebSocket chat end to end", () => {
  let stack: Stack;
  let pool: pg.Pool;
  let otherKey: string;
  /** A browser's credential for the socket: a write token minted with the key (keys never go in URLs). */
  let wsToken: string;
  const wsUrl = (conversation: string, query = "") =>
    `${stack.gatewayUrl.replace(/^http/, "ws")}/v1/conversations/${conversation}/ws?access_token=${wsToken}${query}`;

  beforeAll(async () => {
    stack = await startStack({ hosts: 1, mockModel: { ttftMs: 5, tokensPerS: 2000 } });
    pool = testPool(stack.databaseUrl, 2);
    const db = drizzle(pool, { schema });
    await createTenant(db, "chat-other");
    otherKey = (await createApiKey(db, "chat-other")).key;
    wsToken = (
      await new EarClient({ baseUrl: stack.gatewayUrl, credential: stack.apiKey }).createToken({ scope: "write" })
    ).token;
  }, 180_000);

  afterAll(async () => {
    await pool?.end();
    await stack?.stop();
  }, 60_000);

  it("refuses a bad token, and any API key in the URL, before the upgrade", async () => {
    const base = `${stack.gatewayUrl.replace(/^http/, "ws")}/v1/conversations/c/ws`;
    await expect(Chat.open(`${base}?access_token=nope`)).rejects.toThrow(/HTTP 401/);
    await expect(Chat.open(`${base}?access_token=${stack.apiKey}`)).rejects.toThrow(/HTTP 401/);
    await expect(Chat.open(`${base}?token=${stack.apiKey}`)).rejects.toThrow(/HTTP 401/);
  });

  it("message → job → events → answer; a second message while the first runs is queued, then runs with the history", async () => {
    const conversation = `chat-${Date.now()}`;
    const chat = await Chat.open(wsUrl(conversation));
    const slow = { reply: "first answer with several words in it", tokens_per_s: 40 };
    chat.send({ type: "message", content: `!mock ${JSON.stringify(slow)}`, client_message_id: "m1" });
    const first = await chat.next();
    expect(first).toMatchObject({ type: "job", client_message_id: "m1", job: { conversation_id: conversation } });
    const firstId = first.job?.id as string;

    chat.send({ type: "message", content: "and the second", client_message_id: "m2" });
    const beforeTerminal = await chat.until(isTerminal);
    const queued = beforeTerminal.find((f) => f.type === "queued");
    expect(queued).toMatchObject({ client_message_id: "m2", position: 1 });
    const firstEvents = beforeTerminal.filter((f) => f.type === "event");
    expect(firstEvents.every((f) => f.event?.job_id === firstId)).toBe(true);
    expect(firstEvents.map((f) => f.offset)).toEqual(firstEvents.map((_, i) => i + 1));
    expect(firstEvents.at(-1)?.event?.type).toBe("run.completed");
    expect(textOf(firstEvents)).toBe(slow.reply);

    const second = await chat.next();
    expect(second).toMatchObject({ type: "job", client_message_id: "m2" });
    const secondId = second.job?.id as string;
    const secondEvents = await chat.until(isTerminal);
    expect(secondEvents.every((f) => f.event?.job_id === secondId)).toBe(true);
    expect(textOf(secondEvents)).toBe("Echo: and the second");

    const rows = await pool.query(
      "select id, input, created_at from jobs where conversation_id = $1 order by created_at",
      [conversation],
    );
    expect(rows.rows.map((r) => r.id)).toEqual([firstId, secondId]);
    expect(rows.rows[1].input.messages).toEqual([
      { role: "user", content: `!mock ${JSON.stringify(slow)}` },
      { role: "assistant", content: slow.reply },
      { role: "user", content: "and the second" },
    ]);

    // The same client_message_id again: the same job, no new row.
    chat.send({ type: "message", content: "and the second", client_message_id: "m2" });
    expect(await chat.next()).toMatchObject({ type: "job", job: { id: secondId } });
    const count = await pool.query("select count(*)::int as n from jobs where conversation_id = $1", [conversation]);
    expect(count.rows[0].n).toBe(2);

    const api = apiClient(stack.gatewayUrl, stack.apiKey);
    const history = await api.call<{ messages: Array<Record<string, unknown>> }>(
      "GET",
      `/v1/conversations/${conversation}/messages`,
    );
    expect(history.status).toBe(200);
    expect(history.body.messages.map((m) => [m.role, m.content, m.job_id])).toEqual([
      ["user", `!mock ${JSON.stringify(slow)}`, firstId],
      ["assistant", slow.reply, firstId],
      ["user", "and the second", secondId],
      ["assistant", "Echo: and the second", secondId],
    ]);
    const answer = history.body.messages[1] as { latency: Record<string, number | null> };
    const job = await api.call<{ job: { latency: unknown } }>("GET", `/v1/jobs/${firstId}`);
    expect(answer.latency).toEqual(job.body.job.latency);
    expect(answer.latency.total_latency_ms).toBeGreaterThan(0);
    const other = await apiClient(stack.gatewayUrl, otherKey).call("GET", `/v1/conversations/${conversation}/messages`);
    expect(other.status).toBe(404);
    await chat.close();
  });

  it("a reconnect + resume replays exactly what was missed", async () => {
    const conversation = `resume-${Date.now()}`;
    const chat = await Chat.open(wsUrl(conversation));
    const script = { reply: "one two three four five six seven eight nine ten", tokens_per_s: 30 };
    chat.send({ type: "message", content: `!mock ${JSON.stringify(script)}`, client_message_id: "r1" });
    const job = await chat.next();
    const jobId = job.job?.id as string;
    const seen: Frame[] = [];
    while (seen.length < 3) {
      const f = await chat.next();
      if (f.type === "event") seen.push(f);
    }
    await chat.close();
    await new Promise((r) => setTimeout(r, 150)); // events keep flowing while we are away

    const again = await Chat.open(wsUrl(conversation));
    again.send({ type: "resume", job_id: jobId, after: seen.at(-1)?.offset });
    const rest = await again.until(isTerminal);
    const all = [...seen, ...rest];
    expect(all.map((f) => f.offset)).toEqual(all.map((_, i) => i + 1));

    const sse = await apiClient(stack.gatewayUrl, stack.apiKey).events(jobId);
    expect(all.map((f) => JSON.stringify(f.event))).toEqual(sse.map((e) => e.data));
    await again.close();
  });
});

/**
 * Chat trust boundaries: a failing query's log line carries no SQL parameter or user content;
 * a repeated client_message_id with other content is refused; chat job keys cannot collide with
 * each other or with a client's REST key.
 */
import { DrizzleQueryError } from "drizzle-orm/errors";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../../../../src/contracts/errors";
import { CreateJobBodySchema } from "../../../../src/contracts/job";
import type { ChatSubmission } from "../../../../workers/durable-objects/chat-session/chat-backend";
import { chatIdempotencyKey } from "../../../../workers/durable-objects/chat-session/chat-backend";
import { ChatClient, chatStub, FakeChatBackend, useBackend } from "../../chat-helpers";

const SECRET_PARAM = "secret-param-4711";
const SECRET_VALUE = "secret-value-4712";

/** What drizzle throws when Postgres refuses a query: the bound values sit in its message. */
function failedQuery(): DrizzleQueryError {
  const pgError = Object.assign(new Error(`invalid input syntax for type uuid: "${SECRET_VALUE}"`), {
    name: "NeonDbError",
    code: "22P02",
  });
  return new DrizzleQueryError("insert into jobs (id, input) values ($1, $2)", [SECRET_PARAM, SECRET_VALUE], pgError);
}

class FailingBackend extends FakeChatBackend {
  override async submit(_s: ChatSubmission): Promise<never> {
    throw failedQuery();
  }
}

class MismatchBackend extends FakeChatBackend {
  override async submit(_s: ChatSubmission): Promise<never> {
    throw new ApiError("idempotency_mismatch", "idempotency_key was already used with a different request body");
  }
}

afterEach(() => vi.restoreAllMocks());

describe("chat logs", () => {
  it("a failing query is logged without its parameters or the value Postgres quoted", async () => {
    const lines: string[] = [];
    vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => lines.push(args.map(String).join(" ")));
    vi.spyOn(console, "warn").mockImplementation((...args: unknown[]) => lines.push(args.map(String).join(" ")));
    const conversationId = `conv-${crypto.randomUUID()}`;
    const stub = chatStub("acme", conversationId);
    await useBackend(stub, new FailingBackend());
    const client = await ChatClient.connect(stub, "acme", conversationId);
    client.send({ type: "message", content: `user says ${SECRET_PARAM}`, client_message_id: "m1" });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "internal" }, client_message_id: "m1" });
    client.close();
    const logged = lines.filter((l) => l.includes("chat frame failed"));
    expect(logged).toHaveLength(1);
    expect(logged[0]).toContain("Failed query: insert into jobs");
    expect(logged[0]).toContain("22P02");
    expect(logged[0]).not.toContain(SECRET_PARAM);
    expect(logged[0]).not.toContain(SECRET_VALUE);
  });
});

describe("chat idempotency", () => {
  it("an idempotency mismatch is told to the client as such, not as an internal error", async () => {
    const conversationId = `conv-${crypto.randomUUID()}`;
    const stub = chatStub("acme", conversationId);
    await useBackend(stub, new MismatchBackend());
    const client = await ChatClient.connect(stub, "acme", conversationId);
    client.send({ type: "message", content: "other text", client_message_id: "m1" });
    expect(await client.next()).toMatchObject({
      type: "error",
      error: { code: "idempotency_mismatch" },
      client_message_id: "m1",
    });
    client.close();
  });

  it("a repeated client_message_id with other content is refused, not answered with the first job", async () => {
    const conversationId = `conv-${crypto.randomUUID()}`;
    const stub = chatStub("acme", conversationId);
    const backend = new FakeChatBackend();
    await useBackend(stub, backend);
    const client = await ChatClient.connect(stub, "acme", conversationId);
    client.send({ type: "message", content: "first text", client_message_id: "m1" });
    const job = await client.next();
    expect(job).toMatchObject({ type: "job", client_message_id: "m1" });
    // The same message again is the same job (a retry after a lost answer).
    client.send({ type: "message", content: "first text", client_message_id: "m1" });
    expect(await client.next()).toMatchObject({ type: "job", client_message_id: "m1" });
    // Other content under the same id (while m1 runs, and so would otherwise queue) is a mismatch.
    client.send({ type: "message", content: "second text", client_message_id: "m1" });
    expect(await client.next()).toMatchObject({
      type: "error",
      error: { code: "idempotency_mismatch" },
      client_message_id: "m1",
    });
    // A queued message repeated with other content is a mismatch too.
    client.send({ type: "message", content: "queued text", client_message_id: "m2" });
    expect(await client.next()).toMatchObject({ type: "queued", client_message_id: "m2" });
    client.send({ type: "message", content: "changed text", client_message_id: "m2" });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "idempotency_mismatch" } });
    expect(backend.list().map((j) => j.content)).toEqual(["first text"]);
    client.close();
  });

  it("chat keys are injective in (conversation, message) and no REST key can equal one", () => {
    // Both ids may contain ":", so plain joining made these two the same key.
    expect(chatIdempotencyKey("p", "q:r")).not.toBe(chatIdempotencyKey("p:q", "r"));
    expect(chatIdempotencyKey("a:b", "c:d")).not.toBe(chatIdempotencyKey("a", "b:c:d"));
    const pairs = [
      ["p", "q:r"],
      ["p:q", "r"],
      ["1:p", "q"],
      ["c", "1:c:m"],
    ] as const;
    expect(new Set(pairs.map(([c, m]) => chatIdempotencyKey(c, m))).size).toBe(pairs.length);
    for (const [c, m] of pairs) {
      const key = chatIdempotencyKey(c, m);
      const rest = CreateJobBodySchema.safeParse({
        input: { messages: [{ role: "user", content: "hi" }] },
        idempotency_key: key,
      });
      expect(rest.success, key).toBe(false);
    }
  });
});

/**
 * ChatSessionObject over real workerd WebSockets, with an in-memory stand-in for Postgres/Redis
 * (the job events themselves go through the real JobEvents objects).
 */
import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ServerFrame } from "../../../../src/contracts/chat";
import { ChatClient, chatStub, FakeChatBackend, isTerminalFrame, useBackend } from "../../chat-helpers";
import { batch, envelope, ingest, jobStub } from "../../helpers";

type JobFrame = Extract<ServerFrame, { type: "job" }>;
type EventFrame = Extract<ServerFrame, { type: "event" }>;

async function conversation(tenant = "acme", multitask = "queue") {
  const conversationId = `conv-${crypto.randomUUID()}`;
  const stub = chatStub(tenant, conversationId);
  const backend = new FakeChatBackend();
  await useBackend(stub, backend);
  const client = await ChatClient.connect(stub, tenant, conversationId, multitask);
  return { tenant, conversationId, stub, backend, client };
}

async function emit(jobId: string, seqs: number[], exec = "exec-1"): Promise<void> {
  await ingest(jobStub(jobId), batch(jobId, exec, 1, seqs));
}

async function finish(jobId: string, seq: number, exec = "exec-1"): Promise<void> {
  await ingest(jobStub(jobId), {
    job_id: jobId,
    events: [envelope(jobId, exec, 1, seq, "run.completed", { output: `answer ${seq}` })],
  });
}

const message = (content: string, id: string, extra: Record<string, unknown> = {}) => ({
  type: "message",
  content,
  client_message_id: id,
  ...extra,
});

describe("ChatSession", () => {
  it("turns a message into a job and relays each of its events with its offset, through the terminal event", async () => {
    const { client, backend } = await conversation();
    client.send(message("hello", "m1"));
    const job = (await client.next()) as JobFrame;
    expect(job).toMatchObject({ type: "job", client_message_id: "m1", job: { state: "queued" } });
    expect(backend.list().map((j) => j.content)).toEqual(["hello"]);

    await emit(job.job.id, [1, 2, 3]);
    await finish(job.job.id, 4);
    const frames = (await client.until(isTerminalFrame)) as EventFrame[];
    expect(frames.map((f) => [f.type, f.offset, f.event.seq, f.event.job_id])).toEqual([
      ["event", 1, 1, job.job.id],
      ["event", 2, 2, job.job.id],
      ["event", 3, 3, job.job.id],
      ["event", 4, 4, job.job.id],
    ]);
    await client.quiet();
    client.close();
  });

  it("the same client_message_id twice creates one job", async () => {
    const { client, backend } = await conversation();
    client.send(message("once", "dup"));
    const first = (await client.next()) as JobFrame;
    client.send(message("once", "dup"));
    const second = (await client.next()) as JobFrame;
    expect(second.type).toBe("job");
    expect(second.job.id).toBe(first.job.id);
    expect(backend.list()).toHaveLength(1);
    client.close();
  });

  it("answers malformed frames with an error frame and keeps the connection open", async () => {
    const { client, backend } = await conversation();
    const bad = [
      "not json",
      JSON.stringify({ type: "dance" }),
      JSON.stringify({ type: "message", client_message_id: "x" }),
      JSON.stringify(message("", "x")),
      JSON.stringify(message("hi", "bad id with spaces")),
      JSON.stringify({ type: "resume", job_id: "j", after: -1 }),
      JSON.stringify({ type: "cancel" }),
      JSON.stringify([1, 2]),
    ];
    for (const frame of bad) {
      client.send(frame);
      const reply = await client.next();
      expect(reply, frame).toMatchObject({ type: "error", error: { code: "invalid_frame" } });
      expect((reply as { error: { message: string } }).error.message.length).toBeGreaterThan(3);
    }
    expect(backend.list()).toHaveLength(0);
    client.send(message("still here", "ok-1"));
    expect(await client.next()).toMatchObject({ type: "job" });
    client.close();
  });

  it("queues a message sent while a job runs and submits it when that job's terminal event arrives", async () => {
    const { client, backend } = await conversation();
    client.send(message("first", "q1"));
    const first = (await client.next()) as JobFrame;
    client.send(message("second", "q2"));
    expect(await client.next()).toEqual({ type: "queued", client_message_id: "q2", position: 1 });
    expect(backend.list()).toHaveLength(1);

    await emit(first.job.id, [1]);
    await finish(first.job.id, 2);
    const frames = await client.until((f) => f.type === "job");
    expect(frames.map((f) => f.type)).toEqual(["event", "event", "job"]);
    const second = frames.at(-1) as JobFrame;
    expect(second.client_message_id).toBe("q2");
    expect(backend.list().map((j) => j.content)).toEqual(["first", "second"]);
    await emit(second.job.id, [1]);
    expect(await client.next()).toMatchObject({ type: "event", offset: 1, event: { job_id: second.job.id } });
    client.close();
  });

  it("submits each message with its own agent, else the connection's, kept while it waits in the queue", async () => {
    const tenant = "acme";
    const conversationId = `conv-${crypto.randomUUID()}`;
    const stub = chatStub(tenant, conversationId);
    const backend = new FakeChatBackend();
    await useBackend(stub, backend);
    const client = await ChatClient.connect(stub, tenant, conversationId, "queue", "helper");
    client.send(message("first", "a1"));
    const first = (await client.next()) as JobFrame;
    client.send(message("second", "a2", { agent: "reviewer@2" }));
    expect(await client.next()).toMatchObject({ type: "queued", client_message_id: "a2" });
    // The same id with another agent is another request, refused like other content would be.
    client.send(message("second", "a2", { agent: "reviewer@3" }));
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "idempotency_mismatch" } });
    client.send(message("second", "a2", { agent: "reviewer@2" }));
    expect(await client.next()).toMatchObject({ type: "queued", client_message_id: "a2" });

    await finish(first.job.id, 1);
    await client.until((f) => f.type === "job");
    expect(backend.list().map((j) => [j.content, j.agentRef])).toEqual([
      ["first", "helper"],
      ["second", "reviewer@2"],
    ]);
    // A repeat of a submitted message under another agent is refused too.
    client.send(message("first", "a1", { agent: "reviewer" }));
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "idempotency_mismatch" } });
    client.close();
  });

  it("rejects a message while a job runs under the reject policy (per connection or per message)", async () => {
    const { client, backend } = await conversation("acme", "reject");
    client.send(message("first", "r1"));
    await client.next();
    client.send(message("second", "r2"));
    expect(await client.next()).toMatchObject({
      type: "error",
      error: { code: "conversation_busy" },
      client_message_id: "r2",
    });
    // A per-message policy overrides the connection's.
    client.send(message("third", "r3", { multitask: "queue" }));
    expect(await client.next()).toMatchObject({ type: "queued", client_message_id: "r3" });
    expect(backend.list()).toHaveLength(1);
    client.close();
  });

  it("interrupt cancels the running job and submits the new message at once", async () => {
    const { client, backend } = await conversation("acme", "interrupt");
    client.send(message("long task", "i1"));
    const first = (await client.next()) as JobFrame;
    client.send(message("never mind", "i2"));
    expect(await client.next()).toEqual({ type: "cancel", job_id: first.job.id, status: "requested" });
    const second = (await client.next()) as JobFrame;
    expect(second).toMatchObject({ type: "job", client_message_id: "i2" });
    expect(backend.cancels).toEqual([first.job.id]);
    expect(backend.list()).toHaveLength(2);
    client.close();
  });

  it("a cancel frame reports the cancel status; another conversation's job is not found", async () => {
    const { client } = await conversation();
    client.send(message("x", "c1"));
    const job = (await client.next()) as JobFrame;
    client.send({ type: "cancel", job_id: job.job.id });
    expect(await client.next()).toEqual({ type: "cancel", job_id: job.job.id, status: "requested" });
    client.send({ type: "cancel", job_id: crypto.randomUUID() });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "not_found" } });
    client.close();
  });

  it("shows an approval request as a frame after its event, and takes decisions as frames (idempotent, a different one is a conflict)", async () => {
    const { client, backend } = await conversation();
    client.send(message("run it", "a1"));
    const job = (await client.next()) as JobFrame;
    const id = job.job.id;
    await ingest(jobStub(id), {
      job_id: id,
      events: [
        envelope(id, "exec-1", 1, 1, "run.started", {}),
        envelope(id, "exec-1", 1, 2, "tool.approval_requested", {
          call_id: "call-9",
          tool: "shell",
          arguments: { command: "rm -rf /tmp/x" },
          deadline_at: "2026-12-02T00:00:00.000Z",
        }),
        envelope(id, "exec-1", 1, 3, "run.suspended", {
          waiting_for: { kind: "approval", call_id: "call-9", tool: "shell" },
        }),
      ],
    });
    const frames: ServerFrame[] = [];
    while (frames.length < 4) frames.push(await client.next());
    expect(frames.map((f) => (f.type === "event" ? f.event.type : f.type))).toEqual([
      "run.started",
      "tool.approval_requested",
      "approval_request",
      "run.suspended",
    ]);
    expect(frames[2]).toEqual({
      type: "approval_request",
      job_id: id,
      offset: 2,
      kind: "approval",
      call_id: "call-9",
      tool: "shell",
      arguments: { command: "rm -rf /tmp/x" },
      question: null,
      deadline_at: "2026-12-02T00:00:00.000Z",
    });
    client.send({ type: "decision", job_id: id, call_id: "call-9", decision: "approve", note: "fine" });
    expect(await client.next()).toMatchObject({ type: "decision", job_id: id, call_id: "call-9", decision: "approve" });
    client.send({ type: "decision", job_id: id, call_id: "call-9", decision: "approve" });
    expect(await client.next()).toMatchObject({ type: "decision", decision: "approve" });
    client.send({ type: "decision", job_id: id, call_id: "call-9", decision: "deny" });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "conflict" } });
    client.send({ type: "decision", job_id: crypto.randomUUID(), call_id: "call-9", decision: "deny" });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "not_found" } });
    client.send({ type: "decision", job_id: id, call_id: "call-9", decision: "maybe" });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "invalid_frame" } });
    expect(backend.decisions).toEqual([{ jobId: id, callId: "call-9", decision: "approve" }]);
    client.close();
  });

  it("relays a budget wait (budget.exhausted) as an approval request, and its approval frame carries add_usd", async () => {
    const { client, backend } = await conversation();
    client.send(message("spend it", "b1"));
    const job = (await client.next()) as JobFrame;
    const id = job.job.id;
    await ingest(jobStub(id), {
      job_id: id,
      events: [
        envelope(id, "exec-1", 1, 1, "run.started", {}),
        envelope(id, "exec-1", 1, 2, "budget.exhausted", {
          call_id: "budget_2_0a1b2c3d",
          spent_usd: 0.07,
          limit_usd: 0.05,
          model: "gpt-x",
          deadline_at: "2026-12-02T00:00:00.000Z",
        }),
        envelope(id, "exec-1", 1, 3, "run.suspended", {
          waiting_for: { kind: "budget", call_id: "budget_2_0a1b2c3d", tool: "gpt-x" },
        }),
      ],
    });
    const frames: ServerFrame[] = [];
    while (frames.length < 4) frames.push(await client.next());
    expect(frames[2]).toEqual({
      type: "approval_request",
      job_id: id,
      offset: 2,
      kind: "budget",
      call_id: "budget_2_0a1b2c3d",
      tool: "gpt-x",
      arguments: { spent_usd: 0.07, limit_usd: 0.05 },
      question: null,
      deadline_at: "2026-12-02T00:00:00.000Z",
    });
    client.send({ type: "decision", job_id: id, call_id: "budget_2_0a1b2c3d", decision: "approve", add_usd: 0.5 });
    expect(await client.next()).toMatchObject({ type: "decision", call_id: "budget_2_0a1b2c3d", add_usd: 0.5 });
    // add_usd is checked as the REST body is: positive, and never with a denial.
    client.send({ type: "decision", job_id: id, call_id: "budget_2_0a1b2c3d", decision: "approve", add_usd: -1 });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "invalid_frame" } });
    expect(backend.decisions).toEqual([{ jobId: id, callId: "budget_2_0a1b2c3d", decision: "approve", add_usd: 0.5 }]);
    client.close();
  });

  it("resume after a reconnect replays exactly what was missed, then continues live", async () => {
    const { tenant, conversationId, stub, client } = await conversation();
    client.send(message("stream me", "s1"));
    const job = (await client.next()) as JobFrame;
    await emit(job.job.id, [1, 2, 3]);
    const seen = (await client.take(3)) as EventFrame[];
    client.close(); // the client drops after offset 3
    await emit(job.job.id, [4, 5]);

    const again = await ChatClient.connect(stub, tenant, conversationId);
    again.send({ type: "resume", job_id: job.job.id, after: seen.at(-1)?.offset ?? 0 });
    const missed = (await again.take(2)) as EventFrame[];
    await emit(job.job.id, [6]);
    await finish(job.job.id, 7);
    const live = (await again.until(isTerminalFrame)) as EventFrame[];
    const offsets = [...seen, ...missed, ...live].map((f) => f.offset);
    expect(offsets).toEqual([1, 2, 3, 4, 5, 6, 7]);
    await again.quiet();
    // Resuming a finished job replays its tail and stops at the terminal event.
    again.send({ type: "resume", job_id: job.job.id, after: 5 });
    expect(((await again.take(2)) as EventFrame[]).map((f) => f.offset)).toEqual([6, 7]);
    await again.quiet();
    again.close();
  });

  it("survives eviction mid-conversation: relaying resumes from the stored offset and the queue still drains", async () => {
    const { tenant, conversationId, client, backend } = await conversation();
    client.send(message("before eviction", "e1"));
    const first = (await client.next()) as JobFrame;
    client.send(message("queued across eviction", "e2"));
    expect(await client.next()).toMatchObject({ type: "queued" });
    await emit(first.job.id, [1, 2]);
    expect(((await client.take(2)) as EventFrame[]).map((f) => f.offset)).toEqual([1, 2]);

    await abortAllDurableObjects(); // every object's memory is gone; only storage stays
    const stub = chatStub(tenant, conversationId); // stubs do not outlive the reset either
    // The fresh instance must find what it needs in storage; only the test double is re-injected.
    await useBackend(stub, backend);
    await runInDurableObject(stub, async (_instance, state) => {
      expect(await state.storage.get("active")).toBe(first.job.id);
      expect(await state.storage.get("queue")).toEqual([
        { content: "queued across eviction", client_message_id: "e2" },
      ]);
    });

    // A reset (unlike hibernation) drops the connections: the client reconnects and resumes.
    expect(await runInDurableObject(stub, (_i, state) => state.getWebSockets().length)).toBe(0);
    const live = await ChatClient.connect(stub, tenant, conversationId);
    live.send({ type: "resume", job_id: first.job.id, after: 2 });
    await emit(first.job.id, [3]);
    await finish(first.job.id, 4);
    const frames = await live.until((f) => f.type === "job");
    expect(frames.map((f) => (f.type === "event" ? f.offset : f.type))).toEqual([3, 4, "job"]);
    expect(backend.list().map((j) => j.content)).toEqual(["before eviction", "queued across eviction"]);
    live.close();
  });

  it("is one object per tenant and conversation: another tenant's same conversation id is a different chat", async () => {
    const conversationId = `shared-${crypto.randomUUID()}`;
    const a = chatStub("tenant-a", conversationId);
    const b = chatStub("tenant-b", conversationId);
    expect(a.id.toString()).not.toBe(b.id.toString());
    const backend = new FakeChatBackend();
    await useBackend(a, backend);
    await useBackend(b, backend);
    const ca = await ChatClient.connect(a, "tenant-a", conversationId);
    const cb = await ChatClient.connect(b, "tenant-b", conversationId);
    ca.send(message("secret", "t1"));
    const job = (await ca.next()) as JobFrame;
    await cb.quiet();
    cb.send({ type: "resume", job_id: job.job.id, after: 0 });
    expect(await cb.next()).toMatchObject({ type: "error", error: { code: "not_found" } });
    ca.close();
    cb.close();
  });

  it("counts every frame against the socket's key: past the rate an error frame rate_limited with retry_after_s, no job, and the socket keeps working", async () => {
    const tenant = "acme";
    const conversationId = `conv-${crypto.randomUUID()}`;
    const stub = chatStub(tenant, conversationId);
    const backend = new FakeChatBackend();
    await useBackend(stub, backend);
    const keyHash = "ab".repeat(32);
    const client = await ChatClient.connect(stub, tenant, conversationId, "queue", undefined, keyHash);
    backend.rateBudget = 2;
    const code = (f: ServerFrame) => (f.type === "error" ? f.error.code : f.type);
    client.send({ type: "resume", job_id: crypto.randomUUID(), after: 0 });
    expect(code(await client.next())).toBe("not_found");
    client.send("not json");
    expect(code(await client.next())).toBe("invalid_frame");
    client.send({ type: "resume", job_id: crypto.randomUUID(), after: 0 });
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "rate_limited" }, retry_after_s: 3 });
    client.send("not json either");
    expect(await client.next()).toMatchObject({ type: "error", error: { code: "rate_limited" }, retry_after_s: 3 });
    client.send(message("over the rate", "m-over"));
    expect(await client.next()).toMatchObject({
      type: "error",
      error: { code: "rate_limited" },
      client_message_id: "m-over",
      retry_after_s: 3,
    });
    expect(backend.list()).toEqual([]);
    expect(backend.rateChecks).toEqual(Array(5).fill(keyHash));
    // Once the rate admits frames again, the same socket sends a message that becomes a job.
    backend.rateBudget = 1;
    client.send(message("admitted", "m-ok"));
    expect(await client.next()).toMatchObject({ type: "job", client_message_id: "m-ok" });
    expect(backend.list().map((j) => j.content)).toEqual(["admitted"]);
    client.close();
  });
});

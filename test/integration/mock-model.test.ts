/**
 * The production model adapter against the real mock model server over loopback: scripted
 * answers, pacing, tool calls across turns, the concurrency cap, aborts freeing slots, error
 * mapping, and the raw SSE wire format any OpenAI-compatible client depends on.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createOpenAICompatibleClient } from "../../sandbox-host/model/openai-compatible";
import { modelConfigFromEnv } from "../../sandbox-host/model/provider-config";
import {
  type ModelChunk,
  type ModelClient,
  ModelError,
  type ModelMessage,
  type ModelTurnRequest,
} from "../../sandbox-host/model/types";
import { type MockModel, startMockModel } from "../../tools/mock-model/main";
import { freePort, waitFor } from "../../tools/stack/services/ports";

let mock: MockModel;
let model: ModelClient;

const user = (content: string): ModelMessage => ({ role: "user", content });
const script = (s: Record<string, unknown>) => user(`!mock ${JSON.stringify(s)}`);

interface TimedChunk {
  chunk: ModelChunk;
  atMs: number;
}

async function collect(client: ModelClient, messages: ModelMessage[], signal?: AbortSignal): Promise<TimedChunk[]> {
  const t0 = performance.now();
  const out: TimedChunk[] = [];
  for await (const chunk of client.streamTurn({ messages, signal })) out.push({ chunk, atMs: performance.now() - t0 });
  return out;
}

const texts = (cs: TimedChunk[]) => cs.flatMap(({ chunk }) => (chunk.type === "text" ? [chunk.text] : []));
const doneOf = (cs: TimedChunk[]) => cs.map((c) => c.chunk).find((c) => c.type === "done");

async function modelErrorOf(p: Promise<unknown>): Promise<ModelError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ModelError);
  return err as ModelError;
}

function rootUrl(): string {
  return mock.url.replace(/\/v1$/, "");
}

beforeAll(async () => {
  mock = await startMockModel();
  model = createOpenAICompatibleClient({ baseUrl: mock.url, apiKey: "test-key", model: "mock-model" });
});

afterAll(async () => {
  await mock?.close();
});

beforeEach(() => {
  mock.setMaxConcurrency(null, "reject");
  mock.reset();
});

describe("answers", () => {
  it("echoes the last user message token by token, reconstructing it exactly", async () => {
    const message = "  héllo\tworld,  two  spaces\nand a newline  ";
    const chunks = await collect(model, [user("earlier"), { role: "assistant", content: "ok" }, user(message)]);
    const parts = texts(chunks);
    expect(parts.join("")).toBe(`Echo: ${message}`);
    expect(parts.length).toBeGreaterThan(5);
    expect(doneOf(chunks)).toMatchObject({ type: "done", finishReason: "stop" });
    expect(mock.stats()).toMatchObject({ requests: 1, completed: 1, in_flight: 0 });
  });

  it("streams a scripted reply, and a scripted number of tokens with usage", async () => {
    const reply = "The answer is 42, obviously.";
    expect(texts(await collect(model, [script({ reply })])).join("")).toBe(reply);

    const chunks = await collect(model, [script({ tokens: 25 })]);
    const parts = texts(chunks);
    expect(parts).toHaveLength(25);
    expect(parts.join("")).toBe(Array.from({ length: 25 }, (_, i) => `t${i + 1}`).join(" "));
    expect(doneOf(chunks)).toMatchObject({ usage: { completionTokens: 25 } });
  });

  it("waits ttft_ms before the first chunk", async () => {
    const chunks = await collect(model, [script({ reply: "late but here", ttft_ms: 300 })]);
    expect(chunks[0]!.atMs).toBeGreaterThanOrEqual(295);
    expect(chunks[0]!.atMs).toBeLessThan(1_300);
    expect(texts(chunks).join("")).toBe("late but here");
  });

  it("paces tokens at tokens_per_s", async () => {
    // 21 tokens at 100/s: the last is due 200 ms after the first. The server schedules against
    // absolute times, so the last chunk can never arrive earlier; a busy client may receive the
    // first one late, so the first-to-last span gets a looser floor.
    const chunks = await collect(model, [script({ tokens: 21, tokens_per_s: 100 })]);
    const textChunks = chunks.filter((c) => c.chunk.type === "text");
    expect(textChunks).toHaveLength(21);
    const last = textChunks.at(-1)!.atMs;
    expect(last).toBeGreaterThanOrEqual(195);
    expect(last).toBeLessThan(1_500);
    expect(last - textChunks[0]!.atMs).toBeGreaterThanOrEqual(100);
  });

  it("emits scripted tool calls whole with parsed args, then ends the loop with text after the results", async () => {
    const args0 = { cmd: "ls -la /workspace && echo 'quoted \"json\" here'", n: [1, 2, { deep: true }] };
    const first = [
      script({
        tool_calls: [
          { name: "shell", args: args0 },
          { name: "read_file", args: { path: "/workspace/README.md" } },
        ],
      }),
    ];
    const turn1 = (await collect(model, first)).map((c) => c.chunk);
    const calls = turn1.filter((c) => c.type === "tool_call");
    expect(calls).toEqual([
      { type: "tool_call", id: expect.any(String), name: "shell", args: args0 },
      { type: "tool_call", id: expect.any(String), name: "read_file", args: { path: "/workspace/README.md" } },
    ]);
    expect(new Set(calls.map((c) => c.id)).size).toBe(2);
    expect(turn1.at(-1)).toMatchObject({ type: "done", finishReason: "tool_calls" });
    expect(turn1.some((c) => c.type === "text")).toBe(false);

    const history: ModelMessage[] = [
      ...first,
      { role: "assistant", content: "", toolCalls: calls.map((c) => ({ id: c.id, name: c.name, args: c.args })) },
      { role: "tool", toolCallId: calls[0]!.id, content: "file-a\nfile-b" },
      { role: "tool", toolCallId: calls[1]!.id, content: "# readme" },
    ];
    const turn2 = await collect(model, history);
    expect(turn2.some((c) => c.chunk.type === "tool_call")).toBe(false);
    expect(texts(turn2).join("")).toBe("Echo: file-a\nfile-b\n# readme");
    expect(doneOf(turn2)).toMatchObject({ finishReason: "stop" });

    // A scripted reply is the final answer once the tools ran.
    const withReply = [script({ tool_calls: [{ name: "list_dir", args: {} }], reply: "all done" })];
    const [call] = (await collect(model, withReply)).map((c) => c.chunk).filter((c) => c.type === "tool_call");
    const final = await collect(model, [
      ...withReply,
      { role: "assistant", content: "", toolCalls: [{ id: call!.id, name: call!.name, args: call!.args }] },
      { role: "tool", toolCallId: call!.id, content: "[]" },
    ]);
    expect(texts(final).join("")).toBe("all done");
  });
});

describe("what an agent sends", () => {
  const turn = (req: Omit<ModelTurnRequest, "signal">) => {
    const t0 = performance.now();
    return (async () => {
      const out: TimedChunk[] = [];
      for await (const chunk of model.streamTurn(req)) out.push({ chunk, atMs: performance.now() - t0 });
      return out;
    })();
  };

  it("answers its system prompt, and the sampling and max tokens it received", async () => {
    const system: ModelMessage = { role: "system", content: "You are terse." };
    expect(texts(await turn({ messages: [system, script({ echo_system: true })] })).join("")).toBe("You are terse.");
    const sampled = await turn({
      messages: [script({ echo_sampling: true })],
      model: "up-1",
      temperature: 0.25,
      topP: 0.5,
      maxOutputTokens: 64,
    });
    expect(JSON.parse(texts(sampled).join(""))).toEqual({
      model: "up-1",
      temperature: 0.25,
      top_p: 0.5,
      max_tokens: 64,
    });
  });

  it("cuts the answer at max_tokens with finish reason length", async () => {
    const chunks = await turn({ messages: [script({ tokens: 50 })], maxOutputTokens: 7 });
    expect(texts(chunks)).toHaveLength(7);
    expect(doneOf(chunks)).toMatchObject({ finishReason: "length", usage: { completionTokens: 7 } });
  });

  it("scripts structured answers: replies in turn (a repair request gets the next), or the schema's minimal instance", async () => {
    const responseFormat = {
      name: "r",
      schema: {
        type: "object",
        properties: {
          n: { type: "integer", minimum: 2 },
          tags: { type: "array", items: { type: "string" }, minItems: 1 },
        },
        required: ["n", "tags"],
      },
    };
    const first = script({ replies: ["not json", '{"n": 3}'] });
    expect(texts(await turn({ messages: [first], responseFormat })).join("")).toBe("not json");
    const repair: ModelMessage[] = [
      first,
      { role: "assistant", content: "not json" },
      user("Your previous reply does not satisfy the required JSON Schema."),
    ];
    expect(texts(await turn({ messages: repair, responseFormat })).join("")).toBe('{"n": 3}');
    const unscripted = await turn({ messages: [user("anything")], responseFormat });
    expect(JSON.parse(texts(unscripted).join(""))).toEqual({ n: 2, tags: ["x"] });
  });

  it("leaves the usage chunk out when scripted to (no_usage)", async () => {
    expect(doneOf(await turn({ messages: [script({ reply: "a b", no_usage: true })] }))).toEqual({
      type: "done",
      finishReason: "stop",
    });
    expect(mock.stats().usage_reported).toEqual({ calls: 0, prompt_tokens: 0, completion_tokens: 0 });
  });
});

describe("a flaky provider (failRate)", () => {
  it("fails the given share of requests before output with the given statuses, Retry-After on its 429s, and keeps a ledger", async () => {
    // A seeded generator: the share is then exact enough to assert on.
    let seed = 42;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const flaky = await startMockModel({ failRate: 0.2, failStatuses: [429, 503], failRetryAfterS: 2, random });
    try {
      const client = createOpenAICompatibleClient({ baseUrl: flaky.url, apiKey: "k", model: "m" });
      const codes: string[] = [];
      let usage = { prompt: 0, completion: 0 };
      for (let i = 0; i < 200; i++) {
        try {
          const done = doneOf(await collect(client, [user(`hello ${i}`)]));
          if (done?.type === "done" && done.usage) {
            usage = {
              prompt: usage.prompt + done.usage.promptTokens,
              completion: usage.completion + done.usage.completionTokens,
            };
          }
          codes.push("ok");
        } catch (err) {
          expect(err).toBeInstanceOf(ModelError);
          const e = err as ModelError;
          codes.push(`${e.code}:${e.status}:${e.retryAfterMs}`);
        }
      }
      const count = (c: string) => codes.filter((x) => x === c).length;
      const failures = 200 - count("ok");
      expect(failures).toBeGreaterThan(20);
      expect(failures).toBeLessThan(60);
      expect(count("rate_limited:429:2000") + count("provider_error:503:null")).toBe(failures);
      const stats = flaky.stats();
      expect(stats.injected_failures).toEqual({
        429: count("rate_limited:429:2000"),
        503: count("provider_error:503:null"),
      });
      expect(stats.usage_reported).toEqual({
        calls: count("ok"),
        prompt_tokens: usage.prompt,
        completion_tokens: usage.completion,
      });
    } finally {
      await flaky.close();
    }
  });
});

describe("concurrency cap", () => {
  it("rejects exactly the requests past the cap with 429 → rate_limited, and never over-admits", async () => {
    mock.setMaxConcurrency(2);
    const results = await Promise.allSettled(
      Array.from({ length: 5 }, () => collect(model, [script({ reply: "slow one", ttft_ms: 800 })])),
    );
    const ok = results.filter((r) => r.status === "fulfilled");
    const rejected = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    expect(ok).toHaveLength(2);
    expect(rejected).toHaveLength(3);
    for (const err of rejected) {
      expect(err).toBeInstanceOf(ModelError);
      expect(err).toMatchObject({ code: "rate_limited", status: 429 });
    }
    expect(mock.stats()).toMatchObject({
      requests: 5,
      completed: 2,
      rejected_429: 3,
      in_flight: 0,
      max_concurrency_seen: 2,
      violations: 0,
      cap: 2,
    });
    const viaHttp = (await (await fetch(`${rootUrl()}/stats`)).json()) as Record<string, unknown>;
    expect(viaHttp).toMatchObject({ rejected_429: 3, completed: 2, violations: 0 });
  });

  it('counts over-admission as violations with over_cap "admit" (the counter can fail)', async () => {
    const control = await fetch(`${rootUrl()}/control`, {
      method: "POST",
      body: JSON.stringify({ max_concurrency: 1, over_cap: "admit" }),
    });
    expect(control.status).toBe(200);
    await Promise.all(Array.from({ length: 3 }, () => collect(model, [script({ reply: "x", ttft_ms: 800 })])));
    expect(mock.stats()).toMatchObject({ completed: 3, rejected_429: 0, violations: 2, max_concurrency_seen: 3 });
  });

  it("frees the slot at once when the caller aborts mid-stream", async () => {
    mock.setMaxConcurrency(1);
    const ac = new AbortController();
    const stream = model.streamTurn({ messages: [script({ tokens: 10_000, tokens_per_s: 50 })], signal: ac.signal });
    let received = 0;
    let abortedAt = 0;
    const err = await modelErrorOf(
      (async () => {
        for await (const c of stream) {
          if (c.type === "text" && ++received === 3) {
            abortedAt = performance.now();
            ac.abort();
          }
        }
      })(),
    );
    expect(err.code).toBe("aborted");
    expect(performance.now() - abortedAt).toBeLessThan(500);
    await waitFor("mock in_flight back to 0", async () => mock.stats().in_flight === 0, { timeoutMs: 1_000 });
    expect(mock.stats()).toMatchObject({ aborted: 1, completed: 0 });
    // The slot is really free: with cap 1 the next request is admitted.
    expect(texts(await collect(model, [user("next")])).join("")).toBe("Echo: next");
  });

  it("frees the slot when the consumer stops reading (break) and when aborted before the first chunk", async () => {
    for await (const c of model.streamTurn({ messages: [script({ tokens: 10_000, tokens_per_s: 50 })] })) {
      if (c.type === "text") break;
    }
    await waitFor("slot freed after break", async () => mock.stats().in_flight === 0, { timeoutMs: 1_000 });

    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const err = await modelErrorOf(collect(model, [script({ reply: "never", ttft_ms: 5_000 })], ac.signal));
    expect(err.code).toBe("aborted");
    await waitFor("slot freed after early abort", async () => mock.stats().in_flight === 0, { timeoutMs: 1_000 });
    expect(mock.stats().aborted).toBe(2);
  });
});

describe("request log", () => {
  it("says which conversation made each request and how it ended, across turns", async () => {
    mock.setMaxConcurrency(1);
    const first = script({ reply: "run-a answer", ttft_ms: 300 });
    const a = collect(model, [first]);
    await waitFor("run a in flight", async () => mock.stats().in_flight === 1, { timeoutMs: 2_000 });
    await expect(collect(model, [user("run-b hello")])).rejects.toMatchObject({ code: "rate_limited" });
    await a;
    // A second turn of run a: its first user message (the marker) is unchanged.
    await collect(model, [first, { role: "assistant", content: "run-a answer" }, user("run-a more")]);

    const all = (await (await fetch(`${rootUrl()}/requests`)).json()) as { requests: Array<Record<string, unknown>> };
    expect(all.requests.map((r) => [r.seq, r.outcome])).toEqual([
      [1, "completed"],
      [2, "rejected_429"],
      [3, "completed"],
    ]);
    const runA = (await (
      await fetch(`${rootUrl()}/requests?contains=${encodeURIComponent("run-a answer")}`)
    ).json()) as {
      requests: Array<Record<string, unknown>>;
    };
    expect(runA.requests.map((r) => [r.seq, r.messages, r.last_user])).toEqual([
      [1, 1, first.content],
      [3, 3, "run-a more"],
    ]);
    expect(mock.requests("run-b")).toHaveLength(1);
    mock.reset();
    expect(mock.requests()).toEqual([]);
  });
});

describe("failures", () => {
  it("maps scripted provider errors by status", async () => {
    const e503 = await modelErrorOf(collect(model, [script({ error: { status: 503, message: "overloaded" } })]));
    expect(e503).toMatchObject({ code: "provider_error", status: 503 });
    expect(e503.message).toContain("overloaded");
    const e429 = await modelErrorOf(collect(model, [script({ error: { status: 429 } })]));
    expect(e429).toMatchObject({ code: "rate_limited", status: 429 });
    const e400 = await modelErrorOf(collect(model, [user('!mock {"reply": ')]));
    expect(e400).toMatchObject({ code: "provider_error", status: 400 });
    expect(mock.stats()).toMatchObject({ errors: 3, rejected_429: 0, in_flight: 0 });
  });

  it("answers a bad !mock script with an OpenAI-style 400", async () => {
    for (const content of ["!mock {not json", '!mock {"tokens": "many"}', '!mock {"unknown_field": 1}']) {
      const res = await fetch(`${mock.url}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content }] }),
      });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: { message: string; type: string } };
      expect(body.error.type).toBe("invalid_request_error");
      expect(body.error.message).toMatch(/!mock script/);
    }
  });

  it("maps a connection cut mid-stream to network_error, never to a silent end", async () => {
    const chunks: ModelChunk[] = [];
    const err = await modelErrorOf(
      (async () => {
        for await (const c of model.streamTurn({ messages: [script({ tokens: 10, drop_after_tokens: 4 })] })) {
          chunks.push(c);
        }
      })(),
    );
    expect(err.code).toBe("network_error");
    expect(chunks.filter((c) => c.type === "text")).toHaveLength(4);
    expect(chunks.some((c) => c.type === "done")).toBe(false);
    expect(mock.stats()).toMatchObject({ dropped: 1, in_flight: 0 });
  });

  it("cuts a silent stream after timeoutMs, and maps refused connections to network_error", async () => {
    const impatient = createOpenAICompatibleClient({ baseUrl: mock.url, apiKey: "k", model: "m", timeoutMs: 300 });
    const t0 = performance.now();
    const silent = await modelErrorOf(collect(impatient, [script({ reply: "x", ttft_ms: 5_000 })]));
    expect(silent.code).toBe("network_error");
    expect(performance.now() - t0).toBeLessThan(2_000);
    await waitFor("slot freed after idle timeout", async () => mock.stats().in_flight === 0, { timeoutMs: 1_000 });

    const nowhere = createOpenAICompatibleClient({
      baseUrl: `http://127.0.0.1:${await freePort()}/v1`,
      apiKey: "k",
      model: "m",
    });
    expect((await modelErrorOf(collect(nowhere, [user("hi")]))).code).toBe("network_error");
  });

  it("requires the bearer key when one is configured", async () => {
    const locked = await startMockModel({ apiKey: "s3cret" });
    try {
      const wrong = createOpenAICompatibleClient({ baseUrl: locked.url, apiKey: "nope", model: "m" });
      expect(await modelErrorOf(collect(wrong, [user("hi")]))).toMatchObject({ code: "provider_error", status: 401 });
      const right = createOpenAICompatibleClient({ baseUrl: locked.url, apiKey: "s3cret", model: "m" });
      expect(texts(await collect(right, [user("hi")])).join("")).toBe("Echo: hi");
    } finally {
      await locked.close();
    }
  });
});

describe("wire format", () => {
  it("streams SSE chat.completion.chunk lines ending with [DONE]", async () => {
    const res = await fetch(`${mock.url}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "wire-model",
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: "one two three" }],
      }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const raw = await res.text();
    const events = raw.split("\n\n").filter((e) => e !== "");
    for (const e of events) expect(e).toMatch(/^data: /);
    expect(events.at(-1)).toBe("data: [DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice("data: ".length)));
    for (const c of chunks) {
      expect(c).toMatchObject({ object: "chat.completion.chunk", model: "wire-model", id: chunks[0].id });
    }
    const content = chunks.flatMap((c) =>
      c.choices.map((ch: { delta: { content?: string } }) => ch.delta.content ?? ""),
    );
    expect(content.join("")).toBe("Echo: one two three");
    expect(chunks[0].choices[0].delta.role).toBe("assistant");
    const finishes = chunks.flatMap((c) => c.choices.map((ch: { finish_reason: string | null }) => ch.finish_reason));
    expect(finishes.filter((f) => f !== null)).toEqual(["stop"]);
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 4 } });
  });

  it("answers non-streaming requests, GET /v1/models and unknown routes", async () => {
    const res = await fetch(`${mock.url}/chat/completions`, {
      method: "POST",
      body: JSON.stringify({
        model: "m",
        messages: [script({ tool_calls: [{ name: "shell", args: { cmd: "pwd" } }] })],
      }),
    });
    const body = (await res.json()) as {
      object: string;
      choices: {
        message: { tool_calls: { function: { name: string; arguments: string } }[] };
        finish_reason: string;
      }[];
    };
    expect(body.object).toBe("chat.completion");
    expect(body.choices[0]!.finish_reason).toBe("tool_calls");
    expect(JSON.parse(body.choices[0]!.message.tool_calls[0]!.function.arguments)).toEqual({ cmd: "pwd" });

    const models = (await (await fetch(`${mock.url}/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toContain("mock-model");
    const missing = await fetch(`${mock.url}/nope`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { message: string } }).error.message).toMatch(/no route/);
  });
});

describe("modelConfigFromEnv", () => {
  it("parses the env it is given and names every bad variable", () => {
    expect(
      modelConfigFromEnv({
        MODEL_BASE_URL: "http://127.0.0.1:1/v1",
        MODEL_API_KEY: "k",
        MODEL_NAME: "m",
        MODEL_TIMEOUT_MS: "5000",
      }),
    ).toEqual({ baseUrl: "http://127.0.0.1:1/v1", apiKey: "k", model: "m", timeoutMs: 5000 });
    expect(() => modelConfigFromEnv({})).toThrow(
      /MODEL_BASE_URL is required.*MODEL_API_KEY is required.*MODEL_NAME is required/,
    );
    expect(() =>
      modelConfigFromEnv({ MODEL_BASE_URL: "not a url", MODEL_API_KEY: " ", MODEL_NAME: "m", MODEL_TIMEOUT_MS: "-1" }),
    ).toThrow(
      /MODEL_BASE_URL must be an http\(s\) URL.*MODEL_API_KEY is required.*MODEL_TIMEOUT_MS must be a positive integer/,
    );
  });
});

describe("overhead", () => {
  it("measures the mock's time to first chunk at ttft_ms 0", async () => {
    const samples: number[] = [];
    for (let i = 0; i < 50; i++) {
      const chunks = await collect(model, [user(`ping ${i}`)]);
      samples.push(chunks[0]!.atMs);
    }
    samples.sort((a, b) => a - b);
    const median = samples[25]!;
    const p95 = samples[47]!;
    console.log(
      `mock-model overhead: time to first chunk at ttft_ms 0, 50 sequential requests through the adapter: median ${median.toFixed(2)} ms, p95 ${p95.toFixed(2)} ms`,
    );
    expect(median).toBeLessThan(100);
  });
});

/**
 * The host's side of the model registry and of provider errors: which providers a registry
 * makes (keys from the variables it names, a missing one a startup error naming it), routing a
 * public name to its provider and upstream id, the older single-provider variables still
 * working, Retry-After read in both its forms, a provider's message made safe for tenants, the
 * retry policy's bounds, and the usage estimate.
 */
import { describe, expect, it } from "vitest";
import { hostModelsFromEnv, MODEL_ENV_NAMES, ModelConfigError } from "../../sandbox-host/model/provider-config";
import {
  MAX_PROVIDER_MESSAGE_CHARS,
  retryAfterMs,
  safeProviderMessage,
} from "../../sandbox-host/model/provider-errors";
import { createModelRouter } from "../../sandbox-host/model/router";
import { ModelError, type ModelTurnRequest } from "../../sandbox-host/model/types";
import { CHARS_PER_TOKEN, estimateUsage } from "../../sandbox-host/runner/model-call";
import { isRetryable, type RetryPolicy, retryDelayMs } from "../../sandbox-host/runner/model-retry";

const REGISTRY = JSON.stringify({
  default: "fast",
  models: [
    { name: "big", base_url: "https://a.example/v1", api_key_env: "A_KEY", upstream_model: "big-2025", concurrency: 3 },
    { name: "fast", base_url: "https://a.example/v1", api_key_env: "A_KEY", timeout_ms: 5000 },
    { name: "other", base_url: "https://b.example/v1", api_key_env: "B_KEY" },
    { name: "legacy" },
  ],
});

describe("hostModelsFromEnv", () => {
  const env = {
    MODEL_REGISTRY: REGISTRY,
    A_KEY: "ka",
    B_KEY: "kb",
    MODEL_BASE_URL: "http://c.example/v1",
    MODEL_API_KEY: "kc",
  };

  it("makes one provider per base URL + key + timeout, each serving its models under their upstream ids", () => {
    const { catalog, providers } = hostModelsFromEnv(env);
    expect(catalog.entries.map((e) => e.name)).toEqual(["fast", "big", "other", "legacy"]);
    expect(
      providers.map((p) => ({
        url: p.config.baseUrl,
        key: p.config.apiKey,
        t: p.config.timeoutMs,
        up: [...p.upstream],
      })),
    ).toEqual([
      { url: "https://a.example/v1", key: "ka", t: 5000, up: [["fast", "fast"]] },
      { url: "https://a.example/v1", key: "ka", t: undefined, up: [["big", "big-2025"]] },
      { url: "https://b.example/v1", key: "kb", t: undefined, up: [["other", "other"]] },
      { url: "http://c.example/v1", key: "kc", t: undefined, up: [["legacy", "legacy"]] },
    ]);
  });

  it("refuses to start without a key, naming the variable", () => {
    expect(() => hostModelsFromEnv({ ...env, B_KEY: " " })).toThrow(ModelConfigError);
    expect(() => hostModelsFromEnv({ ...env, B_KEY: undefined })).toThrow(
      /B_KEY \(the key of model "other"\) is not set/,
    );
    expect(() => hostModelsFromEnv({ ...env, MODEL_BASE_URL: undefined })).toThrow(/"legacy" has no base_url/);
  });

  it("takes the registry from a file's text, but not from both places", () => {
    const { MODEL_REGISTRY: _, ...rest } = env;
    expect(
      hostModelsFromEnv({ ...rest, MODEL_REGISTRY_FILE: "/etc/models.json" }, REGISTRY).catalog.entries,
    ).toHaveLength(4);
    expect(() => hostModelsFromEnv(env, REGISTRY)).toThrow(/not both/);
    expect(() => hostModelsFromEnv({ ...rest, MODEL_REGISTRY_FILE: "/x" }, "{")).toThrow(
      /MODEL_REGISTRY_FILE \(\/x\): not JSON/,
    );
  });

  it("still reads MODEL_BASE_URL / MODEL_API_KEY / MODEL_NAME / MODELS without a registry", () => {
    const { catalog, providers } = hostModelsFromEnv({
      MODEL_BASE_URL: "http://m.example/v1",
      MODEL_API_KEY: "k",
      MODEL_NAME: "b",
      MODELS: "a,b",
    });
    expect(catalog.entries.map((e) => e.name)).toEqual(["b", "a"]);
    expect(providers).toHaveLength(1);
    expect([...(providers[0]?.upstream ?? [])]).toEqual([
      ["b", "b"],
      ["a", "a"],
    ]);
    expect(MODEL_ENV_NAMES).toEqual(expect.arrayContaining(["MODEL_REGISTRY", "MODEL_REGISTRY_FILE"]));
  });

  it("routes a public name to its provider's client with the upstream id", async () => {
    const seen: Array<{ url: string; model: string | undefined }> = [];
    const router = createModelRouter(hostModelsFromEnv(env), (cfg) => ({
      async *streamTurn(req: ModelTurnRequest) {
        seen.push({ url: cfg.baseUrl, model: req.model });
        yield { type: "done" as const, finishReason: "stop" };
      },
    }));
    for (const model of ["big", "fast", "other", "legacy", undefined]) {
      for await (const _ of router.streamTurn({ messages: [], ...(model ? { model } : {}) })) {
      }
    }
    expect(seen).toEqual([
      { url: "https://a.example/v1", model: "big-2025" },
      { url: "https://a.example/v1", model: "fast" },
      { url: "https://b.example/v1", model: "other" },
      { url: "http://c.example/v1", model: "legacy" },
      { url: "https://a.example/v1", model: "fast" },
    ]);
  });
});

describe("provider errors", () => {
  const headers = (h: Record<string, string>) => new Headers(h);

  it("reads Retry-After as seconds or an HTTP date, and OpenAI's retry-after-ms", () => {
    const now = Date.parse("2026-12-01T00:00:00Z");
    expect(retryAfterMs(headers({ "retry-after": "3" }), now)).toBe(3000);
    expect(retryAfterMs(headers({ "retry-after": "Tue, 01 Dec 2026 00:00:07 GMT" }), now)).toBe(7000);
    expect(retryAfterMs(headers({ "retry-after": "Mon, 30 Nov 2026 23:00:00 GMT" }), now)).toBe(0);
    expect(retryAfterMs(headers({ "retry-after-ms": "250", "retry-after": "9" }), now)).toBe(250);
    expect(retryAfterMs(headers({ "retry-after": "soon" }), now)).toBeNull();
    expect(retryAfterMs(headers({}), now)).toBeNull();
    expect(retryAfterMs(undefined, now)).toBeNull();
  });

  it("makes a provider's message safe: no URLs, keys, addresses or host names; bounded", () => {
    const said = safeProviderMessage(
      "Invalid 'temperature': 3 > 2. Docs: https://platform.example.com/docs?x=1 Key sk-proj-AbCdEf0123456789xyz " +
        "Authorization: Bearer abc.def.ghi from 10.0.3.7:8000 via gw-1.internal.corp and [fd00::1]:443 " +
        "token 3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c",
    );
    expect(said).toContain("Invalid 'temperature': 3 > 2.");
    expect(said).not.toMatch(/https|platform|sk-proj|abc\.def|10\.0\.3\.7|8000|internal\.corp|fd00|3f9a8b7c/);
    expect(safeProviderMessage("x".repeat(5000)).length).toBe(MAX_PROVIDER_MESSAGE_CHARS);
    // What a 400 says about the request itself stays readable.
    const fieldError = "Invalid type for 'messages[0].content': expected a string, got an object (param tools.0.type).";
    expect(safeProviderMessage(fieldError)).toBe(fieldError);
    expect(safeProviderMessage("model gpt-4o-mini does not support temperature 2.5")).toBe(
      "model gpt-4o-mini does not support temperature 2.5",
    );
    expect(safeProviderMessage("see openai.com or vllm.internal:8000")).toBe("see [host] or [host]");
  });
});

describe("the retry policy", () => {
  const policy: RetryPolicy = { maxRetries: 3, baseMs: 100, maxDelayMs: 250, budgetMs: 1000 };
  const err = (code: ModelError["code"], status: number | null, retryAfter: number | null = null) =>
    new ModelError(code, "x", { status, retryAfterMs: retryAfter });

  it("retries 429, 5xx, in-stream errors and transport failures; never other 4xx or bad responses", () => {
    expect(isRetryable(err("rate_limited", 429))).toBe(true);
    expect(isRetryable(err("provider_error", 503))).toBe(true);
    expect(isRetryable(err("provider_error", null))).toBe(true);
    expect(isRetryable(err("network_error", null))).toBe(true);
    expect(isRetryable(err("provider_error", 400))).toBe(false);
    expect(isRetryable(err("provider_error", 404))).toBe(false);
    expect(isRetryable(err("bad_response", null))).toBe(false);
    expect(isRetryable(err("aborted", null))).toBe(false);
  });

  it("waits a full-jitter backoff below a doubling ceiling, or the Retry-After; bounded in count and time", () => {
    const e = err("provider_error", 500);
    expect([1, 2, 3].map((n) => retryDelayMs(policy, { retry: n, err: e, elapsedMs: 0, random: () => 0.999 }))).toEqual(
      [99, 199, 249],
    );
    expect(retryDelayMs(policy, { retry: 1, err: e, elapsedMs: 0, random: () => 0 })).toBe(0);
    expect(retryDelayMs(policy, { retry: 4, err: e, elapsedMs: 0, random: () => 0.5 })).toBeNull();
    expect(retryDelayMs(policy, { retry: 1, err: err("rate_limited", 429, 700), elapsedMs: 0 })).toBe(700);
    expect(retryDelayMs(policy, { retry: 1, err: err("rate_limited", 429, 700), elapsedMs: 400 })).toBeNull();
    expect(retryDelayMs(policy, { retry: 1, err: err("provider_error", 400), elapsedMs: 0 })).toBeNull();
  });
});

describe("estimated usage", () => {
  it("counts characters of what was sent and received, CHARS_PER_TOKEN to a token, at least one each", () => {
    const usage = estimateUsage(
      {
        model: "m",
        tools: undefined,
        messages: [
          { role: "system", content: "abcd" },
          { role: "user", content: "efghij" },
        ],
      },
      "0123456",
      [],
    );
    expect(usage).toEqual({
      promptTokens: Math.ceil(10 / CHARS_PER_TOKEN),
      completionTokens: Math.ceil(7 / CHARS_PER_TOKEN),
    });
    expect(estimateUsage({ model: "m", tools: undefined, messages: [] }, "", [])).toEqual({
      promptTokens: 1,
      completionTokens: 1,
    });
  });
});

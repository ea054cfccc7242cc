/**
 * Cost and daily budgets end to end, on the real stack (gateway in workerd, Postgres, Redis, one
 * sandbox-host, the mock model priced in the registry): a run's `usage.cost_usd` is its tokens ×
 * the registry's prices, and GET /v1/usage says the same; the operator's CLI sets a tenant's
 * budget (`npm run cli -- tenant set <id> --daily-budget-usd X`); once the day's spend reached
 * it, the next submit, batch and chat message are 429 `budget_exceeded` with Retry-After to the
 * next UTC midnight, while an idempotent replay is still answered; `none` lifts it.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { JobView } from "../../src/contracts/job";
import { waitFor } from "../../tools/stack/services/ports";
import { type Stack, startStack } from "../../tools/stack/start";
import { apiClient } from "../helpers/api";
import { testPool } from "../helpers/db";
import { requireBinary } from "../helpers/require";

const run = promisify(execFile);
const canRun = await requireBinary("redis-server", "apt-get install redis-server");

/** US dollars per million tokens: large, so that one mock answer passes a small budget. */
const PRICE_IN = 3;
const PRICE_OUT = 15;
const REGISTRY = JSON.stringify({
  default: "mock-model",
  models: [{ name: "mock-model", pricing: { input_usd_per_mtok: PRICE_IN, output_usd_per_mtok: PRICE_OUT } }],
});

type ErrorBody = { error: { code: string; message: string } };

describe.skipIf(!canRun)("cost per job and daily budgets (gateway + host)", () => {
  let stack: Stack;
  let api: ReturnType<typeof apiClient>;
  let pool: pg.Pool;
  beforeAll(async () => {
    stack = await startStack({ hosts: 1, modelRegistry: REGISTRY });
    api = apiClient(stack.gatewayUrl, stack.apiKey);
    pool = testPool(stack.databaseUrl, 2);
  }, 180_000);
  afterAll(async () => {
    await pool?.end();
    await stack?.stop();
  }, 60_000);

  const cli = (...args: string[]) =>
    run(process.execPath, ["--import", "tsx", "tools/cli/operator.ts", ...args], {
      env: { ...process.env, DATABASE_URL: stack.databaseUrl },
      timeout: 60_000,
    });
  const submit = (body: Record<string, unknown>) =>
    api.call<{ job: JobView } & ErrorBody>("POST", "/v1/jobs", {
      input: { messages: [{ role: "user", content: "hello" }] },
      ...body,
    });
  const finished = (id: string) =>
    waitFor(
      `job ${id} to finish`,
      async () => {
        const { body } = await api.call<{ job: JobView }>("GET", `/v1/jobs/${id}`);
        return ["queued", "running"].includes(body.job.state) ? null : body.job;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
  const secondsToUtcMidnight = () => {
    const now = new Date();
    return (Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1) - now.getTime()) / 1000;
  };

  it("prices the run at the registry's prices, and a spent budget refuses the next submit, batch and chat message", async () => {
    // The CLI refuses a bad value and an unknown tenant, and sets a budget the run will pass.
    await expect(cli("tenant", "set", "dev", "--daily-budget-usd", "lots")).rejects.toMatchObject({
      stderr: expect.stringContaining("not a number of US dollars"),
    });
    await expect(cli("tenant", "set", "nobody", "--daily-budget-usd", "1")).rejects.toMatchObject({ code: 1 });
    const set = await cli("tenant", "set", "dev", "--daily-budget-usd", "0.00001");
    expect(set.stdout).toContain("daily budget $0.00001");

    const first = await submit({ idempotency_key: "budget-first" });
    expect(first.status).toBe(202);
    const job = await finished(first.body.job.id);
    expect(job.state).toBe("completed");
    expect(job.usage.model_calls).toBe(1);
    expect(job.usage.prompt_tokens).toBeGreaterThan(0);
    expect(job.usage.cost_usd).toBeCloseTo(
      (job.usage.prompt_tokens * PRICE_IN + job.usage.completion_tokens * PRICE_OUT) / 1e6,
      15,
    );
    expect(job.usage.cost_usd as number).toBeGreaterThanOrEqual(0.00001);
    const day = new Date().toISOString().slice(0, 10);
    const usage = await api.call<{ usage: Array<{ model: string; cost_usd: number | null }> }>(
      "GET",
      `/v1/usage?from=${day}&to=${day}`,
    );
    expect(usage.body.usage.find((u) => u.model === "mock-model")?.cost_usd).toBeCloseTo(job.usage.cost_usd ?? -1, 15);

    // The run passed the budget: the next submit makes no job.
    const jobsBefore = Number((await pool.query("select count(*) from jobs")).rows[0].count);
    const refused = await submit({});
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe("budget_exceeded");
    expect(refused.body.error.message).toMatch(/daily budget of \$0\.00001/);
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(Math.abs(retryAfter - secondsToUtcMidnight())).toBeLessThan(5);
    const batch = await api.call<ErrorBody>("POST", "/v1/jobs/batch", {
      jobs: [{ input: { messages: [{ role: "user", content: "a" }] } }],
    });
    expect(batch.status).toBe(429);
    expect(batch.body.error.code).toBe("budget_exceeded");
    // An idempotent replay creates nothing and spends nothing: it is still answered.
    const replay = await submit({ idempotency_key: "budget-first" });
    expect(replay.status).toBe(200);
    expect(replay.body.job.id).toBe(first.body.job.id);

    const ws = await new Promise<WebSocket>((resolve, reject) => {
      const socket = new WebSocket(`${stack.gatewayUrl.replace(/^http/, "ws")}/v1/conversations/budget-conv/ws`, {
        perMessageDeflate: false,
        headers: { authorization: `Bearer ${stack.apiKey}` },
      });
      socket.once("open", () => resolve(socket));
      socket.once("error", reject);
    });
    try {
      const frame = await new Promise<{ type: string; error?: { code: string }; retry_after_s?: number }>((resolve) => {
        ws.on("message", (data) => {
          const f = JSON.parse(String(data));
          if (f.type === "error" || f.type === "job") resolve(f);
        });
        ws.send(JSON.stringify({ type: "message", content: "hi", client_message_id: "b1" }));
      });
      expect(frame.type).toBe("error");
      expect(frame.error?.code).toBe("budget_exceeded");
      expect(Math.abs((frame.retry_after_s ?? 0) - secondsToUtcMidnight())).toBeLessThan(5);
    } finally {
      ws.close();
    }
    expect(Number((await pool.query("select count(*) from jobs")).rows[0].count)).toBe(jobsBefore);

    // `none` lifts the budget: submits work again.
    expect((await cli("tenant", "set", "dev", "--daily-budget-usd", "none")).stdout).toContain("no daily budget");
    const again = await submit({});
    expect(again.status).toBe(202);
  });
});

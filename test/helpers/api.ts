/** A thin client for the public API used by the end-to-end tests. */
import { expect } from "vitest";
import { readSse, type SseEvent } from "../../tools/lib/sse";
import { waitFor } from "../../tools/stack/services/ports";

export interface ApiResponse<T = Record<string, unknown>> {
  status: number;
  body: T;
  headers: Headers;
}

export function apiClient(baseUrl: string, apiKey: string | null) {
  const auth: Record<string, string> = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
  async function call<T = Record<string, unknown>>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<ApiResponse<T>> {
    const init: RequestInit = { method, headers: { ...auth, ...headers } };
    if (body !== undefined) {
      init.body = typeof body === "string" ? body : JSON.stringify(body);
      (init.headers as Record<string, string>)["content-type"] ??= "application/json";
    }
    const res = await fetch(`${baseUrl}${path}`, init);
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {}
    return { status: res.status, body: parsed as T, headers: res.headers };
  }
  async function events(jobId: string, opts: { after?: number; lastEventId?: number; query?: string } = {}) {
    const headers: Record<string, string> = { ...auth };
    if (opts.lastEventId !== undefined) headers["last-event-id"] = String(opts.lastEventId);
    const q = opts.after !== undefined ? `?after=${opts.after}` : (opts.query ?? "");
    const out: SseEvent[] = [];
    for await (const ev of readSse(`${baseUrl}/v1/jobs/${jobId}/events${q}`, {
      headers,
      signal: AbortSignal.timeout(30_000),
    })) {
      out.push(ev);
    }
    return out;
  }
  return { call, events };
}

export const userMessage = (content: string) => ({ input: { messages: [{ role: "user" as const, content }] } });

/** A job whose scripted answer streams 200 words at 10 tokens/s (~20 s): long enough to kill its host mid-run. */
export const longRunMessage = () =>
  userMessage(
    `!mock ${JSON.stringify({ reply: Array.from({ length: 200 }, (_, i) => `w${i}`).join(" "), tokens_per_s: 10 })}`,
  );

/**
 * Agents and their jobs through the API, as the stack tests drive them: define an agent on the
 * stack's model (201), submit a job naming it (202), read a job, wait for it to leave
 * queued/running/waiting, or for it to be `waiting` (an end on the way there throws, saying how).
 */
export function agentJobs<J extends { id: string; state: string }>(
  api: () => ReturnType<typeof apiClient>,
  modelName: () => string,
) {
  const defineAgent = async (name: string, def: Record<string, unknown>) => {
    const r = await api().call("POST", "/v1/agents", { name, model: modelName(), ...def });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
  };
  const submit = async (agent: string, body: Record<string, unknown>) => {
    const r = await api().call<{ job: J }>("POST", "/v1/jobs", { agent, ...body });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    return r.body.job.id;
  };
  const job = async (id: string) => (await api().call<{ job: J }>("GET", `/v1/jobs/${id}`)).body.job;
  const finished = (id: string, timeoutMs = 60_000) =>
    waitFor(
      `job ${id} to finish`,
      async () => {
        const j = await job(id);
        return ["queued", "running", "waiting"].includes(j.state) ? null : j;
      },
      { timeoutMs, intervalMs: 100 },
    );
  const waiting = (id: string, timeoutMs = 30_000) =>
    waitFor(
      `job ${id} to wait`,
      async () => {
        const j = await job(id);
        if (!["queued", "running", "waiting"].includes(j.state))
          throw new Error(`job ended ${j.state}: ${JSON.stringify(j)}`);
        return j.state === "waiting" ? j : null;
      },
      { timeoutMs, intervalMs: 50 },
    );
  return { defineAgent, submit, job, finished, waiting };
}

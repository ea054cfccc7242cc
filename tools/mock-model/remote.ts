/**
 * The mock model's counters and controls read over its own HTTP routes (`GET /stats`,
 * `GET /requests`, `POST /stats/reset`, `POST /control`), for a mock running in another process:
 * the dev stack starts it as a child of its own (tools/stack/start.ts). The same operations as
 * the in-process `MockModel`, each a request, so each returns a promise.
 */
import type { LoggedRequest } from "./request-log";
import type { ProviderLedger } from "./server";
import type { MockStats, OverCapPolicy } from "./slots";

export interface MockModelControl {
  /** Base URL ending in /v1, for an OpenAI client's baseURL. */
  url: string;
  stats(): Promise<MockStats & ProviderLedger>;
  /** The recent completion requests, optionally only those mentioning `contains`. */
  requests(contains?: string): Promise<LoggedRequest[]>;
  /** Zeroes the counters and clears the request log. */
  reset(): Promise<void>;
  setMaxConcurrency(n: number | null, overCap?: OverCapPolicy): Promise<void>;
}

/** `url`: the mock's base URL as it prints it (ending in /v1). */
export function mockModelControl(url: string): MockModelControl {
  const root = url.replace(/\/v1\/?$/, "");
  const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const res = await fetch(`${root}${path}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`mock model ${method} ${path} answered ${res.status}: ${text.slice(0, 200)}`);
    return JSON.parse(text) as T;
  };
  return {
    url,
    stats: () => call("GET", "/stats"),
    requests: async (contains) =>
      (
        await call<{ requests: LoggedRequest[] }>(
          "GET",
          contains === undefined ? "/requests" : `/requests?contains=${encodeURIComponent(contains)}`,
        )
      ).requests,
    reset: async () => void (await call("POST", "/stats/reset")),
    setMaxConcurrency: async (n, overCap) =>
      void (await call("POST", "/control", { max_concurrency: n, ...(overCap ? { over_cap: overCap } : {}) })),
  };
}

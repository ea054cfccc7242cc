/**
 * handleError and handleNotFound alone on a bare app: what each kind of error becomes (status,
 * `{"error":{code,message}}` body, Retry-After), that a cause is logged and never sent, and that a
 * small unread body is drained before the answer.
 */
import { Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../../../src/contracts/errors";
import type { GatewayEnv } from "../../types";
import { apiErrorResponse, handleError, handleNotFound } from "./error-handler";

function bareApp(thrown: () => unknown) {
  const app = new Hono<GatewayEnv>();
  app.onError(handleError);
  app.notFound(handleNotFound);
  app.all("/boom", () => {
    throw thrown();
  });
  return app;
}

afterEach(() => vi.restoreAllMocks());

describe("handleError", () => {
  it("an ApiError answers its own status and code, its message as given, and logs nothing below 500", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const res = await bareApp(() => new ApiError("conflict", "job is already terminal")).request("/boom");
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({ error: { code: "conflict", message: "job is already terminal" } });
    expect(res.headers.get("retry-after")).toBeNull();
    expect(warn).not.toHaveBeenCalled();
    expect(error).not.toHaveBeenCalled();
  });

  it("a 429 carries Retry-After in whole seconds, rounded up", async () => {
    const res = await bareApp(() => new ApiError("rate_limited", "slow down", { retryAfterS: 2.2 })).request("/boom");
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe("3");
    expect(await res.json()).toEqual({ error: { code: "rate_limited", message: "slow down" } });
  });

  it("any other error is a 500 `internal` with a generic message; its cause is logged, never sent", async () => {
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const res = await bareApp(() => new Error("secret detail from the database")).request("/boom", { method: "POST" });
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({
      error: { code: "internal", message: "internal error; the request was not completed" },
    });
    expect(text).not.toContain("secret detail");
    expect(error).toHaveBeenCalledTimes(1);
    const line = JSON.parse(String(error.mock.calls[0]?.[0]));
    expect(line).toMatchObject({ msg: "request failed", method: "POST", path: "/boom", code: "internal" });
    expect(JSON.stringify(line.error)).toContain("secret detail");
  });

  it("a 503 is logged as a warning, not an error", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const res = await bareApp(() => new ApiError("dependency_unavailable", "postgres is unavailable")).request("/boom");
    expect(res.status).toBe(503);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(error).not.toHaveBeenCalled();
  });

  it("hono's own HTTPException keeps its status when it has a code, else becomes 500 `internal`", async () => {
    const tooBig = await bareApp(() => new HTTPException(413, { message: "body too big" })).request("/boom");
    expect(tooBig.status).toBe(413);
    expect(await tooBig.json()).toEqual({ error: { code: "payload_too_large", message: "body too big" } });
    const bare = await bareApp(() => new HTTPException(401)).request("/boom");
    expect(await bare.json()).toEqual({ error: { code: "unauthorized", message: "unauthorized" } });
    vi.spyOn(console, "error").mockImplementation(() => {});
    const teapot = await bareApp(() => new HTTPException(418, { message: "teapot" })).request("/boom");
    expect(teapot.status).toBe(500);
    expect(((await teapot.json()) as { error: { code: string } }).error.code).toBe("internal");
  });

  it("reads a small unread request body to its end before answering, and leaves a large one unread", async () => {
    let small: Request | undefined;
    let large: Request | undefined;
    const app = new Hono<GatewayEnv>();
    app.onError(handleError);
    app.post("/small", (c) => {
      small = c.req.raw;
      throw new ApiError("unauthorized", "no");
    });
    app.post("/large", (c) => {
      large = c.req.raw;
      throw new ApiError("unauthorized", "no");
    });
    const body = (n: number) => ({ method: "POST", body: "x".repeat(n), headers: { "content-length": String(n) } });
    expect((await app.request("/small", body(1024))).status).toBe(401);
    expect(small?.bodyUsed).toBe(true);
    expect((await app.request("/large", body(64 * 1024 + 1))).status).toBe(401);
    expect(large?.bodyUsed).toBe(false);
  });
});

describe("handleNotFound", () => {
  it("answers 404 `not_found` naming the method and path", async () => {
    const res = await bareApp(() => new Error("unused")).request("/v1/nothing-here", { method: "DELETE" });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: { code: "not_found", message: "no route for DELETE /v1/nothing-here" } });
  });
});

describe("apiErrorResponse", () => {
  it("is the same answer without a hono context (a Durable Object's own refusal)", async () => {
    const res = apiErrorResponse(new ApiError("rate_limited", "too many streams", { retryAfterS: 5 }));
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe("5");
    expect(await res.json()).toEqual({ error: { code: "rate_limited", message: "too many streams" } });
  });
});

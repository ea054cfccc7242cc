/**
 * Job admission's checks that need no database (src/domain/job-admission.ts): the effective model
 * (the default when a job names none) against the tenant's allow-list, and the tools. Every path
 * that creates a job calls them; the paths themselves are test/integration/job-admission.test.ts.
 */
import { describe, expect, it } from "vitest";
import {
  admissionError,
  modelRefusal,
  planRefusal,
  queueFullRefusal,
  toolsRefusal,
} from "../../src/domain/job-admission";
import { parseModelRegistry } from "../../src/domain/models";

const catalog = parseModelRegistry(
  JSON.stringify({ default: "premium", models: [{ name: "premium", tenants: ["vip"] }, { name: "open" }] }),
);
if (typeof catalog === "string") throw new Error(catalog);

describe("job admission: model and tools", () => {
  it("checks a job naming no model on the default, and says so", () => {
    expect(modelRefusal(catalog, "vip", undefined)).toBeNull();
    expect(modelRefusal(catalog, "acme", null)).toEqual({
      reason: "model_not_allowed",
      code: "invalid_request",
      message: 'model (omitted, so the default): "premium" is not offered; must be one of open (GET /v1/models)',
    });
    expect(modelRefusal(catalog, "acme", "open")).toBeNull();
    expect(modelRefusal(catalog, "acme", "premium", "agent: a@1's model")?.message).toBe(
      'agent: a@1\'s model: "premium" is not offered; must be one of open (GET /v1/models)',
    );
  });

  it("with no models configured: a job naming none runs on the host's own, one naming any is refused", () => {
    expect(modelRefusal({ entries: [] }, "acme", null)).toBeNull();
    expect(modelRefusal({ entries: [] }, "acme", "x")?.message).toBe(
      'model: "x" is not offered: this deployment offers no choice of model',
    );
  });

  it("admits the sandbox tools and code tool names, refuses any other name", () => {
    expect(toolsRefusal(["shell", "read_file", "lookup_order"])).toBeNull();
    expect(toolsRefusal(["shell", "Not A Tool"])).toMatchObject({
      reason: "tool_not_allowed",
      code: "invalid_request",
      message: 'tools.1: "Not A Tool" is not a tool this tenant may use (GET /v1/tools)',
    });
    expect(planRefusal(catalog, "acme", { model: "open", tools: ["delegate_x"] }, "agent: a@1's ")?.message).toMatch(
      /^agent: a@1's tools\.0: "delegate_x"/,
    );
    // The model is checked first: one refusal, the first that applies.
    expect(planRefusal(catalog, "acme", { model: null, tools: ["Not A Tool"] })?.reason).toBe("model_not_allowed");
  });

  it("answers a request as the API's error: 400, or 429 with Retry-After for a full queue", () => {
    const bad = admissionError(modelRefusal(catalog, "acme", null) as NonNullable<ReturnType<typeof modelRefusal>>);
    expect([bad.code, bad.status, bad.retryAfterS]).toEqual(["invalid_request", 400, undefined]);
    const full = admissionError(queueFullRefusal(20));
    expect([full.code, full.status, full.retryAfterS, full.message]).toEqual([
      "rate_limited",
      429,
      5,
      "this tenant already has 20 queued jobs (the limit)",
    ]);
  });
});

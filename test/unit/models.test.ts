/**
 * The operator's model list (src/domain/models.ts) as the host reads it, and the host's
 * per-tenant quota default: a host with no QUOTA_TENANT_LIMIT used to let one tenant take
 * every model slot (default 0 = no tenant limit).
 */
import { describe, expect, it } from "vitest";
import { hostConfigFromEnv } from "../../sandbox-host/host-config";
import { ModelConfigError, modelCatalogFromEnv } from "../../sandbox-host/model/provider-config";
import { callCostUsd } from "../../sandbox-host/runner/model-call";
import { parseModelList, parseModelRegistry, resolveModel } from "../../src/domain/models";
import { MINIMAL_HOST_ENV } from "../helpers/host-env";

describe("the host's per-tenant quota default", () => {
  it("is on: at most half of a model's slots per tenant unless the operator says otherwise", () => {
    const config = hostConfigFromEnv(MINIMAL_HOST_ENV);
    expect(config.quotaTenantLimit).toBeGreaterThan(0);
    expect(config.quotaTenantLimit).toBeLessThan(config.quotaModelLimit);
    expect(hostConfigFromEnv({ ...MINIMAL_HOST_ENV, QUOTA_TENANT_LIMIT: "0" }).quotaTenantLimit).toBe(0);
  });
});

describe("the model list", () => {
  it("is just MODEL_NAME without MODELS: closed to any other string", () => {
    const catalog = modelCatalogFromEnv({ MODEL_NAME: "gpt-4o-mini" });
    expect(catalog.entries.map((e) => e.name)).toEqual(["gpt-4o-mini"]);
    expect(resolveModel(catalog, null)?.name).toBe("gpt-4o-mini");
    expect(resolveModel(catalog, "gpt-4o-mini")?.name).toBe("gpt-4o-mini");
    expect(resolveModel(catalog, "anything-else")).toBeNull();
  });

  it("puts MODEL_NAME first (the default) and refuses a MODELS that leaves it out", () => {
    const catalog = modelCatalogFromEnv({ MODEL_NAME: "b", MODELS: "a,b,c" });
    expect(catalog.entries.map((e) => e.name)).toEqual(["b", "a", "c"]);
    expect(resolveModel(catalog, undefined)?.name).toBe("b");
    expect(resolveModel(catalog, "c")?.name).toBe("c");
    expect(() => modelCatalogFromEnv({ MODEL_NAME: "z", MODELS: "a,b" })).toThrow(ModelConfigError);
    expect(() => modelCatalogFromEnv({ MODEL_NAME: "z", MODELS: "a,b" })).toThrow(/must include MODEL_NAME/);
  });

  it("names what is wrong with a list", () => {
    expect(parseModelList("a, b")).toEqual({ entries: [{ name: "a" }, { name: "b" }] });
    expect(parseModelList("")).toEqual({ entries: [] });
    expect(parseModelList("a,")).toMatch(/empty name/);
    expect(parseModelList("a b")).toMatch(/not a model name/);
    expect(parseModelList("a,a")).toMatch(/listed twice/);
  });
});

describe("registry pricing", () => {
  it("reads `pricing` per million tokens, leaves it off an unpriced entry, and refuses a bad one", () => {
    const catalog = parseModelRegistry(
      JSON.stringify({
        models: [
          { name: "priced", pricing: { input_usd_per_mtok: 0.15, output_usd_per_mtok: 0.6 } },
          { name: "free-of-price" },
        ],
      }),
    );
    if (typeof catalog === "string") throw new Error(catalog);
    expect(catalog.entries[0]?.pricing).toEqual({ inputUsdPerMtok: 0.15, outputUsdPerMtok: 0.6 });
    expect(catalog.entries[1]?.pricing).toBeUndefined();
    expect(
      callCostUsd(
        { promptTokens: 1_000_000, completionTokens: 500_000 },
        { inputUsdPerMtok: 0.15, outputUsdPerMtok: 0.6 },
      ),
    ).toBeCloseTo(0.45, 12);
    const bad = (pricing: unknown) => parseModelRegistry(JSON.stringify({ models: [{ name: "m", pricing }] }));
    expect(bad({ input_usd_per_mtok: -1, output_usd_per_mtok: 1 })).toMatch(/pricing\.input_usd_per_mtok/);
    expect(bad({ input_usd_per_mtok: 1 })).toMatch(/pricing\.output_usd_per_mtok/);
    expect(bad({ input_usd_per_mtok: 1, output_usd_per_mtok: 1, currency: "EUR" })).toMatch(/pricing/);
  });
});

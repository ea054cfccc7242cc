/**
 * The agent, model and usage routes up to the database: what the gateway decides from the body
 * and its configuration alone. These tests run without Postgres, so a request that gets past
 * every check ends in 503 dependency_unavailable, which is how a test shows a body was accepted.
 * What needs rows (versions, resolution at submit, another tenant's agent, usage sums) is
 * test/integration/agents-api.test.ts.
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { AGENT_LIMITS } from "../../src/contracts/agent";
import { generateApiKey, hashApiKey } from "../../src/domain/api-keys";
import { createApp } from "../../workers/app";
import { rememberTenant } from "../../workers/middleware/auth/tenant-cache";
import { testEnv } from "./helpers";

const BASE = "http://gateway.test";

/** The operator's registry: one model for everyone, one for tenant "ta" only, one for "tb" only. */
const REGISTRY = JSON.stringify({
  default: "shared-model",
  models: [
    {
      name: "ta-model",
      base_url: "https://provider-a.internal.example/v1",
      api_key_env: "PROVIDER_A_SECRET_KEY",
      upstream_model: "upstream-a-2026",
      tenants: ["ta"],
      tenant_concurrency: 3,
      tenant_limits: { ta: 5 },
    },
    { name: "shared-model", tenant_concurrency: 2, pricing: { input_usd_per_mtok: 0.15, output_usd_per_mtok: 0.6 } },
    { name: "tb-model", tenants: ["tb"] },
  ],
});

const app = createApp();

/** A key the auth middleware already knows for `tenant` (seeded into its per-isolate cache). */
async function keyFor(tenant: string): Promise<string> {
  const { key } = generateApiKey();
  rememberTenant(await hashApiKey(key), tenant);
  return key;
}

async function call(
  tenant: string,
  method: string,
  path: string,
  body?: unknown,
  extraEnv: Record<string, string> = {},
): Promise<{ status: number; body: Record<string, unknown>; text: string }> {
  const headers: Record<string, string> = { authorization: `Bearer ${await keyFor(tenant)}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const req = new Request(`${BASE}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const ctx = createExecutionContext();
  const res = await app.fetch(req, { ...testEnv, MODEL_REGISTRY: REGISTRY, ...extraEnv }, ctx);
  await waitOnExecutionContext(ctx);
  const text = await res.text();
  return { status: res.status, body: JSON.parse(text) as Record<string, unknown>, text };
}

const errorOf = (r: { body: Record<string, unknown> }) => r.body.error as { code: string; message: string };

const agentBody = { name: "triage", model: "shared-model", instructions: "Sort the ticket." };

describe("GET /v1/models", () => {
  it("lists the models this tenant may use, the default marked, and nothing of the providers", async () => {
    const ta = await call("ta", "GET", "/v1/models");
    expect(ta.status).toBe(200);
    expect(ta.body).toEqual({
      models: [
        {
          name: "shared-model",
          default: true,
          tenant_concurrency: 2,
          pricing: { input_usd_per_mtok: 0.15, output_usd_per_mtok: 0.6 },
        },
        { name: "ta-model", default: false, tenant_concurrency: 5, pricing: null },
      ],
    });
    for (const secret of ["provider-a.internal", "PROVIDER_A_SECRET_KEY", "upstream-a-2026", "tb-model"]) {
      expect(ta.text).not.toContain(secret);
    }
    const tb = await call("tb", "GET", "/v1/models");
    expect((tb.body.models as { name: string }[]).map((m) => m.name)).toEqual(["shared-model", "tb-model"]);
  });

  it("serves the older MODELS list to every tenant when there is no registry", async () => {
    const r = await call("ta", "GET", "/v1/models", undefined, { MODEL_REGISTRY: "", MODELS: "m1,m2" });
    expect(r.body).toEqual({
      models: [
        { name: "m1", default: true, tenant_concurrency: null, pricing: null },
        { name: "m2", default: false, tenant_concurrency: null, pricing: null },
      ],
    });
  });
});

describe("POST /v1/agents: the body is checked before any database work", () => {
  it("accepts a valid definition as far as the database (503 here: there is none)", async () => {
    const r = await call("ta", "POST", "/v1/agents", {
      ...agentBody,
      model: "ta-model",
      tools: ["shell"],
      limits: { max_turns: 4, timeout_s: 60 },
      sampling: { temperature: 0.2 },
      response_format: { type: "object", properties: { label: { type: "string" } }, required: ["label"] },
    });
    expect(r.status).toBe(503);
    expect(errorOf(r).code).toBe("dependency_unavailable");
  });

  it.each([
    ["a wrong type", { ...agentBody, limits: { max_turns: "8" } }, /limits\.max_turns/],
    ["a NUL byte", { ...agentBody, instructions: "a\u0000b" }, /instructions: must not contain a NUL/],
    ["an unknown field", { ...agentBody, temperature: 0.5 }, /temperature/],
    // A name that could be a code tool's is checked against the catalog (test/integration/code-tools.test.ts).
    ["an unknown tool", { ...agentBody, tools: ["Browser!"] }, /tools\.0: "Browser!" is not a built-in tool/],
    ["a name that cannot be one", { ...agentBody, name: "Triage Bot" }, /^name: /],
    ["no model", { name: "x" }, /^model: /],
    [
      "an oversized definition",
      { ...agentBody, response_format: { type: "object", description: "d".repeat(AGENT_LIMITS.maxDefinitionBytes) } },
      /at most 65536 bytes/,
    ],
    [
      "a response_format that is not a JSON Schema",
      { ...agentBody, response_format: { type: "objectx" } },
      /^response_format: not a valid JSON Schema \(draft 2020-12\): type: /,
    ],
    [
      "a response_format with a nested mistake",
      { ...agentBody, response_format: { type: "object", properties: { n: { minimum: "zero" } } } },
      /^response_format: .*properties\/n\/minimum/,
    ],
    [
      "a response_format whose $ref goes nowhere",
      { ...agentBody, response_format: { $ref: "#/$defs/missing" } },
      /^response_format: .*Unresolved \$ref "#\/\$defs\/missing"/,
    ],
    [
      "a response_format in another dialect",
      { ...agentBody, response_format: { $schema: "http://json-schema.org/draft-07/schema#", type: "object" } },
      /^response_format: .*\$schema: only https:\/\/json-schema\.org\/draft\/2020-12\/schema/,
    ],
    ["a priority above 100", { ...agentBody, priority: 101 }, /^priority: /],
    ["a priority that is not an integer", { ...agentBody, priority: 1.5 }, /^priority: /],
    ["a model the operator does not offer", { ...agentBody, model: "gpt-9" }, /^model: "gpt-9" is not offered/],
    [
      "a model offered to another tenant only",
      { ...agentBody, model: "tb-model" },
      /^model: "tb-model" is not offered/,
    ],
  ])("refuses %s with a 400 that says what", async (_label, body, message) => {
    const r = await call("ta", "POST", "/v1/agents", body);
    expect(r.status).toBe(400);
    expect(errorOf(r).code).toBe("invalid_request");
    expect(errorOf(r).message).toMatch(message);
  });

  it("bounds a response_format's nesting: 64 levels are accepted, deeper is a 400, never a stack overflow's 500", async () => {
    // `{"items":` per level: 64 objects nested, the innermost {"type":"string"}.
    const nested = (levels: number) => `${'{"items":'.repeat(levels - 1)}{"type":"string"}${"}".repeat(levels - 1)}`;
    const body = (levels: number) => `{"name":"deep","model":"shared-model","response_format":${nested(levels)}}`;
    const ok = await call("ta", "POST", "/v1/agents", body(64));
    expect(ok.status).toBe(503);
    for (const levels of [65, 20_000]) {
      const r = await call("ta", "POST", "/v1/agents", body(levels));
      expect([levels, r.status]).toEqual([levels, 400]);
      expect(errorOf(r).message).toBe("response_format: nests objects and arrays more than 64 levels deep");
    }
  });

  it("refuses a non-JSON body with 400 invalid_json", async () => {
    const r = await call("ta", "POST", "/v1/agents", "{nope");
    expect(r.status).toBe(400);
    expect(errorOf(r).code).toBe("invalid_json");
  });
});

describe("mcp_servers: checked against the operator's MCP settings before any database work", () => {
  const MCP_ENV = {
    MCP_ALLOWED_URLS: "https://mcp.example.com/tools, http://10.0.0.7:9000/",
    MCP_SECRET_NAMES: "github_token,jira_key",
  };
  const server = {
    name: "github",
    url: "https://mcp.example.com/tools/github",
    headers: { Authorization: { secret: "github_token" } },
    tools: ["search_issues", { name: "create_issue", requires_approval: true }],
    timeout_ms: 5000,
  };
  const withServers = (...servers: unknown[]) => ({ ...agentBody, mcp_servers: servers });

  it("accepts servers under an allowed prefix with known secrets, as far as the database (503 here)", async () => {
    const r = await call(
      "ta",
      "POST",
      "/v1/agents",
      withServers(server, { ...server, name: "internal", url: "http://10.0.0.7:9000/mcp", headers: {} }),
      MCP_ENV,
    );
    expect([r.status, errorOf(r).code]).toEqual([503, "dependency_unavailable"]);
    // Without MCP_SECRET_NAMES the gateway cannot know the names: the hosts check them.
    const unchecked = await call(
      "ta",
      "POST",
      "/v1/agents",
      withServers({ ...server, headers: { Authorization: { secret: "anything" } } }),
      { MCP_ALLOWED_URLS: MCP_ENV.MCP_ALLOWED_URLS },
    );
    expect(unchecked.status).toBe(503);
  });

  it.each([
    ["any server when MCP is off (no MCP_ALLOWED_URLS)", withServers(server), {}, /^mcp_servers: MCP is not enabled/],
    [
      "a URL outside every allowed prefix",
      withServers({ ...server, url: "https://mcp.example.com/admin" }),
      MCP_ENV,
      /^mcp_servers\.0\.url: not a URL the operator allows/,
    ],
    [
      "a host that only starts with an allowed one",
      withServers({ ...server, url: "https://mcp.example.com.attacker.net/tools/x" }),
      MCP_ENV,
      /^mcp_servers\.0\.url: not a URL the operator allows/,
    ],
    [
      "a path that only starts with an allowed one",
      withServers({ ...server, url: "https://mcp.example.com/toolsmith" }),
      MCP_ENV,
      /^mcp_servers\.0\.url: not a URL the operator allows/,
    ],
    [
      "a path that climbs out of an allowed one once decoded",
      withServers({ ...server, url: "https://mcp.example.com/tools/..%2f..%2fadmin" }),
      MCP_ENV,
      /^mcp_servers\.0\.url: not a URL the operator allows/,
    ],
    [
      "another port of an allowed host",
      withServers({ ...server, url: "http://10.0.0.7:9001/" }),
      MCP_ENV,
      /^mcp_servers\.0\.url: not a URL the operator allows/,
    ],
    [
      "a secret the operator does not hold",
      withServers({ ...server, headers: { "X-Key": { secret: "aws_root" } } }),
      MCP_ENV,
      /^mcp_servers\.0\.headers\.X-Key: unknown secret "aws_root"/,
    ],
    [
      "a header value written as text (headers name secrets only)",
      withServers({ ...server, headers: { Authorization: "Bearer ghp_123" } }),
      MCP_ENV,
      /mcp_servers\.0\.headers\.Authorization/,
    ],
    [
      "a header the host sets (the fencing identity)",
      withServers({ ...server, headers: { "x-ear-epoch": { secret: "github_token" } } }),
      MCP_ENV,
      /mcp_servers\.0\.headers.*set by the host/,
    ],
    [
      "a URL that is not http(s)",
      withServers({ ...server, url: "file:///etc/passwd" }),
      MCP_ENV,
      /mcp_servers\.0\.url: must be an http\(s\) URL/,
    ],
    [
      "credentials in the URL",
      withServers({ ...server, url: "https://user:pw@mcp.example.com/tools/x" }),
      MCP_ENV,
      /mcp_servers\.0\.url: must be an http\(s\) URL without credentials/,
    ],
    ["a server name with capitals", withServers({ ...server, name: "GitHub" }), MCP_ENV, /mcp_servers\.0\.name/],
    ["no tools", withServers({ ...server, tools: [] }), MCP_ENV, /mcp_servers\.0\.tools/],
    [
      "a tool name with a dot",
      withServers({ ...server, tools: ["issues.search"] }),
      MCP_ENV,
      /mcp_servers\.0\.tools\.0/,
    ],
    [
      "a <server>__<tool> name over 64 characters",
      withServers({ ...server, name: "s".repeat(31), tools: ["t".repeat(32)] }),
      MCP_ENV,
      /mcp_servers\.0\.tools\.0: .* longer than 64 characters/,
    ],
    [
      "a tool listed twice",
      withServers({ ...server, tools: ["a", { name: "a", requires_approval: true }] }),
      MCP_ENV,
      /lists a tool twice/,
    ],
    ["a server named twice", withServers(server, server), MCP_ENV, /names a server twice/],
    [
      "two servers whose tools get the same name",
      withServers({ ...server, name: "a__b", tools: ["c"] }, { ...server, name: "a", tools: ["b__c"] }),
      MCP_ENV,
      /same <server>__<tool> name/,
    ],
    [
      "a timeout over 10 minutes",
      withServers({ ...server, timeout_ms: 600_001 }),
      MCP_ENV,
      /mcp_servers\.0\.timeout_ms/,
    ],
  ])("refuses %s with a 400 that says what", async (_label, body, env, message) => {
    const r = await call("ta", "POST", "/v1/agents", body, env);
    expect([r.status, errorOf(r).code]).toEqual([400, "invalid_request"]);
    expect(errorOf(r).message).toMatch(message);
  });

  it("refuses a secret scoped to other tenants (MCP_SECRET_NAMES name:tenant|…) as unknown; its tenants may name it", async () => {
    const env = { ...MCP_ENV, MCP_SECRET_NAMES: "github_token, tb_token:tb|tc" };
    const body = withServers({ ...server, headers: { Authorization: { secret: "tb_token" } } });
    const refused = await call("ta", "POST", "/v1/agents", body, env);
    expect([refused.status, errorOf(refused).code, errorOf(refused).message]).toEqual([
      400,
      "invalid_request",
      'mcp_servers.0.headers.Authorization: unknown secret "tb_token" (not one of the operator\'s MCP secrets this tenant may use)',
    ]);
    const version = await call("ta", "POST", "/v1/agents/triage/versions", { ...body, name: undefined }, env);
    expect([version.status, errorOf(version).message]).toEqual([
      400,
      expect.stringMatching(/unknown secret "tb_token"/),
    ]);
    // Its own tenants get as far as the database (503 here).
    const allowed = await call("tb", "POST", "/v1/agents", body, env);
    expect([allowed.status, errorOf(allowed).code]).toEqual([503, "dependency_unavailable"]);
  });

  it("checks a new version's servers the same way", async () => {
    const r = await call(
      "ta",
      "POST",
      "/v1/agents/triage/versions",
      {
        model: "shared-model",
        mcp_servers: [{ ...server, url: "https://elsewhere.example.com/" }],
      },
      MCP_ENV,
    );
    expect([r.status, errorOf(r).message]).toEqual([400, expect.stringMatching(/^mcp_servers\.0\.url: not a URL/)]);
  });
});

describe("POST /v1/agents/{name}/versions: the whole definition, checked the same way", () => {
  it("refuses a name in the body (the path names the agent) and a bad schema", async () => {
    const named = await call("ta", "POST", "/v1/agents/triage/versions", agentBody);
    expect(named.status).toBe(400);
    expect(errorOf(named).message).toMatch(/name/);
    const { name: _, ...definition } = agentBody;
    const bad = await call("ta", "POST", "/v1/agents/triage/versions", { ...definition, response_format: { type: 5 } });
    expect(bad.status).toBe(400);
    expect(errorOf(bad).message).toMatch(/^response_format: /);
    const ok = await call("ta", "POST", "/v1/agents/triage/versions", definition);
    expect(ok.status).toBe(503);
  });

  it("answers 404 for a path that cannot name an agent or a version, without a query", async () => {
    // The agent's own 404s (a missing route would answer a generic one), reached with no database.
    const badName = await call("ta", "GET", "/v1/agents/Not%20A%20Name");
    expect([badName.status, errorOf(badName).message]).toEqual([404, "agent not found"]);
    for (const v of ["0", "v2"]) {
      const r = await call("ta", "GET", `/v1/agents/triage/versions/${v}`);
      expect([r.status, errorOf(r).message]).toEqual([404, "version not found"]);
    }
  });

  it("refuses a cursor it did not issue", async () => {
    const r = await call("ta", "GET", "/v1/agents?cursor=bm9wZQ");
    expect(r.status).toBe(400);
    expect(errorOf(r).message).toMatch(/^cursor: /);
  });
});

describe("a job naming an agent", () => {
  const input = { messages: [{ role: "user", content: "hi" }] };

  it("may not also give model or tools, and says why", async () => {
    for (const extra of [{ model: "shared-model" }, { tools: ["shell"] }]) {
      const r = await call("ta", "POST", "/v1/jobs", { input, agent: "triage", ...extra });
      expect(r.status).toBe(400);
      expect(errorOf(r).message).toMatch(
        /^agent: give either `agent` or `model`\/`tools`.*fixes the model and the tools/,
      );
    }
  });

  it("with metadata nested too deep is a 400 (it was a 500: the checks recursed until the stack overflowed)", async () => {
    const deep = `${'{"a":'.repeat(30_000)}1${"}".repeat(30_000)}`;
    const r = await call("ta", "POST", "/v1/jobs", `{"input":${JSON.stringify(input)},"metadata":${deep}}`);
    expect(r.status).toBe(400);
    expect(errorOf(r).message).toBe("metadata: nests objects and arrays more than 64 levels deep");
  });

  it("must be a name or name@N", async () => {
    for (const agent of ["Triage", "triage@0", "triage@x", "triage@1@2", ""]) {
      const r = await call("ta", "POST", "/v1/jobs", { input, agent });
      expect(r.status, agent).toBe(400);
      expect(errorOf(r).message).toMatch(/^agent: /);
    }
  });

  it("refuses a model not offered to the tenant before any database work", async () => {
    const r = await call("ta", "POST", "/v1/jobs", { input, model: "tb-model" });
    expect(r.status).toBe(400);
    expect(errorOf(r).message).toMatch(/^model: "tb-model" is not offered; must be one of shared-model, ta-model/);
    expect((await call("ta", "POST", "/v1/jobs", { input, model: "ta-model" })).status).toBe(503);
  });

  it("without a model runs on the default, which must be offered to the tenant too", async () => {
    const closedDefault = JSON.stringify({ models: [{ name: "tb-only", tenants: ["tb"] }, { name: "open" }] });
    const ta = await call("ta", "POST", "/v1/jobs", { input }, { MODEL_REGISTRY: closedDefault });
    expect(ta.status).toBe(400);
    expect(errorOf(ta).message).toBe(
      'model (omitted, so the default): "tb-only" is not offered; must be one of open (GET /v1/models)',
    );
    expect((await call("tb", "POST", "/v1/jobs", { input }, { MODEL_REGISTRY: closedDefault })).status).toBe(503);
    // No registry and no list: nothing to choose from, the host's own model runs, as before.
    expect((await call("ta", "POST", "/v1/jobs", { input }, { MODEL_REGISTRY: "" })).status).toBe(503);
  });

  it("on a chat connection (?agent=) must have the same form", async () => {
    const ctx = createExecutionContext();
    const res = await app.fetch(
      new Request(`${BASE}/v1/conversations/c1/ws?agent=Not@Valid`, {
        headers: { authorization: `Bearer ${await keyFor("ta")}`, upgrade: "websocket" },
      }),
      { ...testEnv, MODEL_REGISTRY: REGISTRY },
      ctx,
    );
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/^agent: /);
  });
});

describe("GET /v1/usage: the range is checked before any database work", () => {
  it.each([
    ["no dates", "", /from: /],
    ["a date that is not a day", "?from=2026-02-30&to=2026-03-01", /from: is not a calendar date/],
    ["a date in another form", "?from=2026-1-1&to=2026-01-02", /from: must be a date as YYYY-MM-DD/],
    ["from after to", "?from=2026-03-02&to=2026-03-01", /from must not be after to/],
    ["more than 366 days", "?from=2025-01-01&to=2026-01-02", /at most 366 days/],
  ])("refuses %s with 400", async (_label, query, message) => {
    const r = await call("ta", "GET", `/v1/usage${query}`);
    expect(r.status).toBe(400);
    expect(errorOf(r).message).toMatch(message);
  });

  it("accepts exactly 366 days (then needs the database)", async () => {
    const r = await call("ta", "GET", "/v1/usage?from=2024-01-01&to=2024-12-31");
    expect(r.status).toBe(503);
  });
});

/**
 * The operator's MCP settings as the gateway and the hosts parse them: URL prefixes compared
 * parsed (origin, then whole path segments), the hosts' secrets (inline or file text, never
 * echoed in an error) and their tenant scopes (MCP_SECRETS and the gateway's MCP_SECRET_NAMES),
 * and the approval hook's MCP half.
 */
import { describe, expect, it } from "vitest";
import { McpConfigError, mcpConfigFromEnv, secretFor } from "../../sandbox-host/mcp/mcp-config";
import { AgentDefinitionSchema } from "../../src/contracts/agent";
import {
  type AllowedUrl,
  isUrlAllowed,
  mcpRequiresApproval,
  mcpServersProblem,
  parseAllowedUrls,
  parseSecretNames,
} from "../../src/domain/mcp";

describe("MCP_ALLOWED_URLS", () => {
  const parsed = parseAllowedUrls(" https://mcp.example.com/tools ,http://10.0.0.7:9000,");
  const allowed: AllowedUrl[] = typeof parsed === "string" ? [] : parsed;

  it.each([
    ["https://mcp.example.com/tools", true],
    ["https://mcp.example.com/tools/", true],
    ["https://mcp.example.com/tools/github/mcp", true],
    ["http://10.0.0.7:9000/anything", true],
    ["https://mcp.example.com/toolsmith", false],
    ["https://mcp.example.com/", false],
    ["https://mcp.example.com.attacker.net/tools", false],
    ["http://mcp.example.com/tools", false],
    ["http://10.0.0.7:9001/", false],
    ["http://10.0.0.8:9000/", false],
    ["not a url", false],
    // Compared on the decoded, dot-normalised path: what a server that decodes `%2f` serves.
    ["https://mcp.example.com/tools/..%2f..%2fadmin", false],
    ["https://mcp.example.com/tools/%2e%2e/admin", false],
    ["https://mcp.example.com/tools/..%252fadmin", false],
    ["https://mcp.example.com/tools/..%5cadmin", false],
    ["https://mcp.example.com/tools/%00", false],
    ["https://mcp.example.com/tools/%E0%A4%A", false],
    ["https://mcp.example.com/tools/a%2fb", true],
    ["https://mcp.example.com/tools/a/../b", true],
    ["https://mcp.example.com/tools/a/..", true],
    ["https://user:pw@mcp.example.com/tools/x", false],
    ["https://user@mcp.example.com/tools/x", false],
  ])("%s → %s", (url, ok) => {
    expect(isUrlAllowed(url, allowed)).toBe(ok);
  });

  it("a prefix written with its slash does not admit the folder's name without one", () => {
    const hooks = parseAllowedUrls("https://h.example.com/hooks/") as AllowedUrl[];
    expect(isUrlAllowed("https://h.example.com/hooks", hooks)).toBe(false);
    expect(isUrlAllowed("https://h.example.com/hooks/", hooks)).toBe(true);
    expect(isUrlAllowed("https://h.example.com/hooks/x", hooks)).toBe(true);
    expect(isUrlAllowed("https://h.example.com/hooks/..%2f..%2fadmin", hooks)).toBe(false);
    expect(isUrlAllowed("https://h.example.com/", parseAllowedUrls("https://h.example.com") as AllowedUrl[])).toBe(
      true,
    );
  });

  it("a loopback host with any port (http://127.0.0.1:*) admits it on every port, under its path, and no other host", () => {
    const local = parseAllowedUrls("http://127.0.0.1:*,http://localhost:*/hooks/") as AllowedUrl[];
    expect(isUrlAllowed("http://127.0.0.1:4000/anything", local)).toBe(true);
    expect(isUrlAllowed("http://127.0.0.1/x", local)).toBe(true);
    expect(isUrlAllowed("http://localhost:9999/hooks/a", local)).toBe(true);
    expect(isUrlAllowed("http://localhost:9999/admin", local)).toBe(false);
    expect(isUrlAllowed("https://127.0.0.1:4000/x", local)).toBe(false);
    expect(isUrlAllowed("http://127.0.0.2:4000/x", local)).toBe(false);
    expect(isUrlAllowed("http://127.0.0.1.evil.test:4000/x", local)).toBe(false);
    expect(parseAllowedUrls("https://hooks.example.com:*")).toMatch(/only on localhost, 127.0.0.1 or \[::1\]/);
  });

  it("is empty (MCP off) when unset or blank, and names a bad entry", () => {
    expect(parseAllowedUrls(undefined)).toEqual([]);
    expect(parseAllowedUrls(" , ")).toEqual([]);
    expect(parseAllowedUrls("https://ok.example.com,ftp://x")).toBe('"ftp://x" is not an http(s) URL');
    expect(parseAllowedUrls("https://u:p@x.example.com/")).toMatch(/without credentials/);
    expect(parseAllowedUrls("mcp.example.com")).toBe('"mcp.example.com" is not a URL');
  });
});

describe("the host's MCP secrets", () => {
  it("reads MCP_SECRETS or the file's text, and refuses both, non-JSON without echoing it, and non-string values", () => {
    expect([...mcpConfigFromEnv({ MCP_SECRETS: '{"a":"1","b":"2"}' }).secrets]).toEqual([
      ["a", { value: "1", tenants: null }],
      ["b", { value: "2", tenants: null }],
    ]);
    expect([...mcpConfigFromEnv({}, '{"f":"from-file"}').secrets]).toEqual([
      ["f", { value: "from-file", tenants: null }],
    ]);
    expect(() => mcpConfigFromEnv({ MCP_SECRETS: '{"a":"1"}' }, "{}")).toThrow(/not both/);
    const broken = () => mcpConfigFromEnv({ MCP_SECRETS: "{ghp_leaky" });
    expect(broken).toThrow(McpConfigError);
    expect(broken).toThrow(/MCP_SECRETS is not JSON$/);
    expect(() => mcpConfigFromEnv({ MCP_SECRETS: '{"a":7}' })).toThrow(/secret "a" must be a non-empty string/);
    expect(() => mcpConfigFromEnv({ MCP_ALLOWED_URLS: "gopher://x" })).toThrow(/MCP_ALLOWED_URLS/);
    expect(mcpConfigFromEnv({}).allowedUrls).toEqual([]);
  });
});

describe("an operator secret's tenant scope", () => {
  it("reads a string (every tenant) or {value, tenants} (those tenants), on the host and in the file", () => {
    const text = JSON.stringify({ all: "v1", some: { value: "v2", tenants: ["acme", "beta-2"] } });
    for (const config of [mcpConfigFromEnv({ MCP_SECRETS: text }), mcpConfigFromEnv({}, text)]) {
      expect([...config.secrets]).toEqual([
        ["all", { value: "v1", tenants: null }],
        ["some", { value: "v2", tenants: ["acme", "beta-2"] }],
      ]);
      expect(
        ["acme", "beta-2", "gamma"].map((t) => [secretFor(config, "all", t), secretFor(config, "some", t)]),
      ).toEqual([
        ["v1", "v2"],
        ["v1", "v2"],
        ["v1", undefined],
      ]);
      expect(secretFor(config, "missing", "acme")).toBeUndefined();
    }
  });

  it.each([
    ['{"s":{"value":"v"}}', /secret "s": tenants must be a non-empty list of tenant ids$/],
    ['{"s":{"value":"v","tenants":[]}}', /secret "s": tenants must be a non-empty list of tenant ids$/],
    ['{"s":{"value":"v","tenants":"acme"}}', /secret "s": tenants must be a non-empty list/],
    ['{"s":{"value":"v","tenants":["Acme Corp"]}}', /secret "s": "Acme Corp" is not a tenant id$/],
    ['{"s":{"value":"v","tenants":[7]}}', /secret "s": 7 is not a tenant id$/],
    ['{"s":{"value":"","tenants":["acme"]}}', /secret "s" must be a non-empty string or \{"value"/],
    ['{"s":{"tenants":["acme"]}}', /secret "s" must be a non-empty string or \{"value"/],
    ['{"s":{"value":"v","tenants":["acme"],"tenant":"x"}}', /secret "s" must be a non-empty string or \{"value"/],
    ['{"s":["v"]}', /secret "s" must be a non-empty string or \{"value"/],
  ])("refuses %s (a startup error: the host exits 2)", (text, message) => {
    for (const parse of [() => mcpConfigFromEnv({ MCP_SECRETS: text }), () => mcpConfigFromEnv({}, text)]) {
      expect(parse).toThrow(McpConfigError);
      expect(parse).toThrow(message);
    }
    // The value is never quoted back.
    expect(() => mcpConfigFromEnv({ MCP_SECRETS: '{"s":{"value":"hunter2-leak"}}' })).not.toThrow(/hunter2/);
  });

  it("MCP_SECRET_NAMES: a plain comma list as before, or name:acme|beta; a bad entry is named", () => {
    expect(parseSecretNames(" a , b,")).toEqual(
      new Map([
        ["a", null],
        ["b", null],
      ]),
    );
    expect(parseSecretNames("gh:acme|beta, jira ,ops: acme ")).toEqual(
      new Map<string, string[] | null>([
        ["gh", ["acme", "beta"]],
        ["jira", null],
        ["ops", ["acme"]],
      ]),
    );
    expect(parseSecretNames(undefined)).toEqual(new Map());
    expect(parseSecretNames("gh:")).toBe('"gh": "" is not a tenant id');
    expect(parseSecretNames("gh:acme||beta")).toBe('"gh": "" is not a tenant id');
    expect(parseSecretNames(":acme")).toBe('":acme": the secret\'s name is empty');
    expect(parseSecretNames("gh,gh:acme")).toBe('"gh" is listed twice');
  });

  it("mcpServersProblem: a secret outside the tenant's scope reads as unknown", () => {
    const allowed = parseAllowedUrls("https://mcp.example.com/");
    const names = parseSecretNames("shared,gh:acme");
    if (typeof allowed === "string" || typeof names === "string") throw new Error("parse");
    const def = AgentDefinitionSchema.parse({
      model: "m",
      mcp_servers: [
        { name: "a", url: "https://mcp.example.com/a", headers: { "X-S": { secret: "shared" } }, tools: ["t"] },
        { name: "b", url: "https://mcp.example.com/b", headers: { Authorization: { secret: "gh" } }, tools: ["t"] },
      ],
    });
    expect(mcpServersProblem(def.mcp_servers, allowed, names, "acme")).toBeNull();
    expect(mcpServersProblem(def.mcp_servers, allowed, names, "beta")).toBe(
      'mcp_servers.1.headers.Authorization: unknown secret "gh" (not one of the operator\'s MCP secrets this tenant may use)',
    );
    // Names unknown to the gateway: the hosts decide.
    expect(mcpServersProblem(def.mcp_servers, allowed, null, "beta")).toBeNull();
  });
});

describe("mcpRequiresApproval (the approval gate's MCP half)", () => {
  const def = AgentDefinitionSchema.parse({
    model: "m",
    mcp_servers: [
      { name: "gh", url: "https://mcp.example.com/gh", tools: ["search", { name: "merge", requires_approval: true }] },
      { name: "jira", url: "https://mcp.example.com/jira", tools: [{ name: "search", requires_approval: false }] },
    ],
  });
  it("answers per <server>__<tool>, and null for anything that is not one of the definition's MCP tools", () => {
    expect(mcpRequiresApproval(def, "gh__merge")).toBe(true);
    expect(mcpRequiresApproval(def, "gh__search")).toBe(false);
    expect(mcpRequiresApproval(def, "jira__search")).toBe(false);
    expect(mcpRequiresApproval(def, "jira__merge")).toBeNull();
    expect(mcpRequiresApproval(def, "shell")).toBeNull();
    expect(mcpRequiresApproval(null, "gh__merge")).toBeNull();
    // A version stored before mcp_servers existed has none.
    expect(mcpRequiresApproval({} as never, "gh__merge")).toBeNull();
  });
});

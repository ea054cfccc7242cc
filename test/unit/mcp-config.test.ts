/**
 * The operator's MCP settings as the gateway and the hosts parse them: URL prefixes compared
 * parsed (origin, then whole path segments), the hosts' secrets (inline or file text, never
 * echoed in an error), and the approval hook's MCP half.
 */
import { describe, expect, it } from "vitest";
import { McpConfigError, mcpConfigFromEnv } from "../../sandbox-host/mcp/config";
import { AgentDefinitionSchema } from "../../src/contracts/agent";
import { type AllowedUrl, isUrlAllowed, mcpRequiresApproval, parseAllowedUrls } from "../../src/domain/mcp";

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
  ])("%s → %s", (url, ok) => {
    expect(isUrlAllowed(url, allowed)).toBe(ok);
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
      ["a", "1"],
      ["b", "2"],
    ]);
    expect([...mcpConfigFromEnv({}, '{"f":"from-file"}').secrets]).toEqual([["f", "from-file"]]);
    expect(() => mcpConfigFromEnv({ MCP_SECRETS: '{"a":"1"}' }, "{}")).toThrow(/not both/);
    const broken = () => mcpConfigFromEnv({ MCP_SECRETS: "{ghp_leaky" });
    expect(broken).toThrow(McpConfigError);
    expect(broken).toThrow(/MCP_SECRETS is not JSON$/);
    expect(() => mcpConfigFromEnv({ MCP_SECRETS: '{"a":7}' })).toThrow(/secret "a" must be a non-empty string/);
    expect(() => mcpConfigFromEnv({ MCP_ALLOWED_URLS: "gopher://x" })).toThrow(/MCP_ALLOWED_URLS/);
    expect(mcpConfigFromEnv({}).allowedUrls).toEqual([]);
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

/** The `delegates` field of an agent definition: names that can be tool names, no repeats, bounded. */
import { describe, expect, it } from "vitest";
import { AgentDefinitionSchema, DELEGATE_TOOL_PREFIX, DELEGATION_LIMITS } from "../../src/contracts/agent";

const parse = (delegates: unknown) => AgentDefinitionSchema.safeParse({ model: "m", delegates });

describe("agent definition: delegates", () => {
  it("defaults to none and keeps the listed order", () => {
    expect(AgentDefinitionSchema.parse({ model: "m" }).delegates).toEqual([]);
    expect(parse(["b", "a"]).data?.delegates).toEqual(["b", "a"]);
  });

  it("refuses a repeated name, a name that is not an agent name, and too many", () => {
    expect(parse(["a", "a"]).success).toBe(false);
    expect(parse(["Bad Name"]).success).toBe(false);
    expect(parse(["a@2"]).success).toBe(false);
    const many = Array.from({ length: DELEGATION_LIMITS.maxDelegates + 1 }, (_, i) => `agent-${i}`);
    expect(parse(many).success).toBe(false);
    expect(parse(many.slice(1)).success).toBe(true);
  });

  it("keeps every delegate tool name within the 64 characters providers accept", () => {
    const longest = "a".repeat(DELEGATION_LIMITS.maxDelegateNameChars);
    expect(parse([longest]).success).toBe(true);
    expect(`${DELEGATE_TOOL_PREFIX}${longest}`.length).toBeLessThanOrEqual(64);
    expect(parse([`${longest}a`]).success).toBe(false);
  });

  it("refuses an MCP server named with the delegate tools' prefix (its tools would shadow or be shadowed by a delegate)", () => {
    const withServer = (name: string) =>
      AgentDefinitionSchema.safeParse({
        model: "m",
        mcp_servers: [{ name, url: "https://mcp.example/mcp", tools: ["t"] }],
      });
    expect(withServer("delegate_x").success).toBe(false);
    expect(withServer("delegate_x").error?.issues[0]?.message).toContain("delegate_");
    expect(withServer("delegates-db").success).toBe(true);
    expect(withServer("x").success).toBe(true);
  });
});

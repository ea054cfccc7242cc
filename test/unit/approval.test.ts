/**
 * The one approval check (src/domain/approval.ts) and the agent definition's tool forms: which
 * calls wait, for what, and the defaults a definition stored before approvals existed gets.
 */
import { describe, expect, it } from "vitest";
import { AgentDefinitionSchema } from "../../src/contracts/agent";
import { ASK_USER_TOOL, approvalSettings, requiresApproval, toolNames } from "../../src/domain/approval";

const def = (extra: Record<string, unknown>) => AgentDefinitionSchema.parse({ model: "m", ...extra });

describe("requiresApproval", () => {
  it("gates exactly the tools marked requires_approval, and ask_user when the agent offers it", () => {
    const d = def({
      tools: ["read_file", { name: "shell", requires_approval: true }, { name: "list_dir" }],
      ask_user: true,
    });
    expect(requiresApproval(d, "shell")).toBe("approval");
    expect(requiresApproval(d, "read_file")).toBeNull();
    expect(requiresApproval(d, "list_dir")).toBeNull();
    expect(requiresApproval(d, ASK_USER_TOOL)).toBe("input");
    expect(requiresApproval(d, "write_file")).toBeNull();
    expect(requiresApproval(def({}), ASK_USER_TOOL)).toBeNull();
    // The built-in default agent never waits.
    expect(requiresApproval(null, "shell")).toBeNull();
    expect(toolNames(d.tools)).toEqual(["read_file", "shell", "list_dir"]);
  });

  it("the definition refuses a tool listed twice in either form, unknown fields, and a deadline out of range", () => {
    const bad = (extra: Record<string, unknown>) => AgentDefinitionSchema.safeParse({ model: "m", ...extra }).success;
    expect(bad({ tools: ["shell", { name: "shell", requires_approval: true }] })).toBe(false);
    expect(bad({ tools: [{ name: "shell", requires_approval: true, extra: 1 }] })).toBe(false);
    // "rm" could be a code tool's name (the gateway then checks the catalog); "rm -rf" cannot.
    expect(bad({ tools: [{ name: "rm -rf" }] })).toBe(false);
    expect(bad({ approval: { deadline_s: 0 } })).toBe(false);
    expect(bad({ approval: { on_deadline: "retry" } })).toBe(false);
    expect(bad({ approval: { deadline_s: 60, on_deadline: "fail" } })).toBe(true);
  });

  it("a definition stored before approvals existed gets the schema's defaults", () => {
    const stored = { model: "m", tools: ["shell"] } as unknown as Parameters<typeof approvalSettings>[0];
    expect(approvalSettings(stored)).toEqual({ deadline_s: 86_400, on_deadline: "deny" });
    expect(approvalSettings(null)).toEqual({ deadline_s: 86_400, on_deadline: "deny" });
    expect(requiresApproval({ tools: ["shell"] } as never, ASK_USER_TOOL)).toBeNull();
  });
});

/**
 * The mock's `tool_turns`: a scripted run of several tool turns (the run-cost bench's 5-turn tool
 * run), ended by the scripted reply; without it the tools are called on the first answer only.
 */
import { describe, expect, it } from "vitest";
import { type CompletionRequest, planAnswer } from "./script";

const timing = { ttftMs: 0, tokensPerS: 0 };
let n = 0;
const nextId = () => `call_${++n}`;

function conversation(script: Record<string, unknown>, toolRounds: number): CompletionRequest {
  const messages: Array<Record<string, unknown>> = [{ role: "user", content: `!mock ${JSON.stringify(script)}` }];
  for (let i = 0; i < toolRounds; i++) {
    const id = `c${i}`;
    messages.push({
      role: "assistant",
      content: null,
      tool_calls: [{ id, type: "function", function: { name: "shell", arguments: "{}" } }],
    });
    messages.push({ role: "tool", tool_call_id: id, content: "ok" });
  }
  return { model: "mock-model", messages } as unknown as CompletionRequest;
}

const toolsOf = (plan: ReturnType<typeof planAnswer>) => (plan.kind === "answer" ? plan.toolCalls.length : -1);

describe("mock script tool_turns", () => {
  const script = { tool_calls: [{ name: "shell", args: { command: "true" } }], reply: "done" };

  it("calls the tools on the first tool_turns answers, then gives the reply", () => {
    const five = { ...script, tool_turns: 4 };
    for (let round = 0; round < 4; round++)
      expect(toolsOf(planAnswer(conversation(five, round), timing, nextId))).toBe(1);
    const last = planAnswer(conversation(five, 4), timing, nextId);
    expect(toolsOf(last)).toBe(0);
    expect(last.kind === "answer" && last.tokens).toBeTruthy();
  });

  it("without tool_turns calls them once, as before", () => {
    expect(toolsOf(planAnswer(conversation(script, 0), timing, nextId))).toBe(1);
    expect(toolsOf(planAnswer(conversation(script, 1), timing, nextId))).toBe(0);
  });
});

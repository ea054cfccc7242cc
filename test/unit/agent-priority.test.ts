/** The `priority` field of an agent definition: its jobs' default priority, in the submit's range. */
import { describe, expect, it } from "vitest";
import { AgentDefinitionError, agentBody, defineAgent } from "../../src/code-tools/define-agent";
import { ADMISSION_LIMITS } from "../../src/contracts/admission";
import {
  AgentDefinitionSchema,
  AgentViewSchema,
  agentPriority,
  CreateAgentBodySchema,
} from "../../src/contracts/agent";
import { CreateJobBodySchema } from "../../src/contracts/job";

const parse = (priority: unknown) => AgentDefinitionSchema.safeParse({ model: "m", priority });
const paths = (priority: unknown) => parse(priority).error?.issues.map((i) => i.path.join(".")) ?? [];

describe("agent definition: priority", () => {
  it("defaults to 0 and keeps a value of the submit's range, both ends included", () => {
    expect(AgentDefinitionSchema.parse({ model: "m" }).priority).toBe(0);
    expect([-100, -1, 10, 100].map((p) => parse(p).data?.priority)).toEqual([-100, -1, 10, 100]);
    expect([ADMISSION_LIMITS.minPriority, ADMISSION_LIMITS.maxPriority]).toEqual([-100, 100]);
    // The same range a submit's own priority has.
    for (const p of [-101, -100, 100, 101]) {
      const job = CreateJobBodySchema.safeParse({ input: { messages: [{ role: "user", content: "x" }] }, priority: p });
      expect([p, parse(p).success], String(p)).toEqual([p, job.success]);
    }
  });

  it("refuses out of range, fractions, strings and null, naming the field", () => {
    for (const p of [101, -101, 1.5, "5", null]) expect(paths(p), String(p)).toEqual(["priority"]);
  });

  it("is in the create body and the view, like every definition field", () => {
    expect(CreateAgentBodySchema.parse({ name: "a", model: "m", priority: 5 }).priority).toBe(5);
    expect("priority" in AgentViewSchema.shape).toBe(true);
  });

  it("reads 0 from a version stored before the field existed", () => {
    const { priority: _p, ...older } = AgentDefinitionSchema.parse({ model: "m", priority: 9 });
    expect(agentPriority(older as never)).toBe(0);
    expect(agentPriority({ priority: -3 })).toBe(-3);
  });

  it("defineAgent carries it and refuses a bad one when the file loads", () => {
    expect(agentBody(defineAgent({ name: "urgent", model: "m", priority: 10 })).priority).toBe(10);
    expect(agentBody(defineAgent({ name: "plain", model: "m" })).priority).toBe(0);
    expect(() => defineAgent({ name: "loud", model: "m", priority: 200 })).toThrow(AgentDefinitionError);
    expect(() => defineAgent({ name: "loud", model: "m", priority: 200 })).toThrow(/priority/);
  });
});

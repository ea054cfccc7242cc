/** `npm run demo` at a run that waits for a person: the commands to approve, deny or answer. */
import { describe, expect, it } from "vitest";
import { waitingHelp } from "./demo-help";

describe("the demo's help at a waitpoint", () => {
  it("prints the approve and deny calls for the job's call", () => {
    const help = waitingHelp("job-1", {
      type: "tool.approval_requested",
      payload: { call_id: "call_1", tool: "request_refund" },
    }) as string;
    expect(help).toContain("request_refund");
    expect(help).toContain(`require("./.dev/stack.json").gateway_url`);
    expect(help).toContain(`"$GW/v1/jobs/job-1/approvals/call_1"`);
    expect(help).toContain(`'{"decision":"approve"}'`);
    expect(help).toContain(`'{"decision":"deny","note":"not now"}'`);
  });

  it("prints the input call for a question, and nothing for other events", () => {
    const help = waitingHelp(
      "job-1",
      { type: "input.requested", payload: { call_id: "c", question: "Which?" } },
      "/x/stack.json",
    );
    expect(help).toContain("Which?");
    expect(help).toContain(`"$GW/v1/jobs/job-1/input"`);
    expect(help).toContain(`require("/x/stack.json")`);
    expect(waitingHelp("job-1", { type: "run.started", payload: {} })).toBeNull();
  });
});

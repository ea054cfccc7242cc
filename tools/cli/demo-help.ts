/**
 * What `npm run demo` prints when a run stops for a person (tools/cli/demo.ts): the exact
 * commands that approve, deny or answer (docs/api.md "Approvals and questions").
 */
import { isAbsolute } from "node:path";
/** The commands that decide or answer what a job waits on, for this stack (its files, not its key in the text). */
export function waitingHelp(
  jobId: string,
  event: { type: string; payload: { call_id?: unknown; tool?: unknown; question?: unknown } },
  stackFile = ".dev/stack.json",
): string | null {
  const callId = String(event.payload.call_id ?? "");
  const file = isAbsolute(stackFile) ? stackFile : `./${stackFile}`;
  const env = `GW=$(node -p 'require("${file}").gateway_url'); KEY=$(node -p 'require("${file}").api_key')`;
  const post = (path: string, body: string) =>
    `curl -s -X POST "$GW${path}" -H "authorization: Bearer $KEY" -H 'content-type: application/json' -d '${body}'`;
  if (event.type === "tool.approval_requested") {
    const url = `/v1/jobs/${jobId}/approvals/${encodeURIComponent(callId)}`;
    return [
      `the run waits for an approval of ${String(event.payload.tool)} (call ${callId}); in another terminal:`,
      `  ${env}`,
      `  ${post(url, '{"decision":"approve"}')}`,
      `or deny it:`,
      `  ${post(url, '{"decision":"deny","note":"not now"}')}`,
      `(or decide it in the console's job view); this stream goes on once it is decided.`,
    ].join("\n");
  }
  if (event.type === "input.requested") {
    return [
      `the run waits for an answer to: ${String(event.payload.question)}; in another terminal:`,
      `  ${env}`,
      `  ${post(`/v1/jobs/${jobId}/input`, '{"content":"your answer"}')}`,
      `this stream goes on once it is answered.`,
    ].join("\n");
  }
  return null;
}

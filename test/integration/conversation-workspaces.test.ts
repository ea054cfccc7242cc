/**
 * Conversation workspaces (docs/sandboxes.md "Conversation workspaces"), on the real stack with
 * real Docker sandboxes and a provider of the test's own: a `workspace: "conversation"` agent's
 * job writes /workspace/notes.txt, and the conversation's next job reads it with `cat`; a job of
 * another conversation, and a `workspace: "run"` agent's job in the same conversation, do not see
 * it; a job that calls no tool makes no sandbox; a job restores the chain (a full snapshot and
 * diffs) an earlier job left and adds its own diff on it; a cancelled job's (the `interrupt`
 * policy's) last snapshot is what the conversation's next job starts from.
 */
import { describe, expect, it } from "vitest";
import type { SseEvent } from "../../tools/lib/sse";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import { requireDocker } from "../helpers/docker";
import type { ProviderRequest } from "../helpers/fake-provider";
import { useProviderStack } from "../helpers/provider-stack";
import { requireBinary } from "../helpers/require";

const canRun =
  (await requireDocker()) !== null && (await requireBinary("redis-server", "apt-get install redis-server"));

interface Job {
  id: string;
  state: string;
  output: string | null;
}

const caseOf = (req: ProviderRequest): string =>
  String(req.body.messages.find((m: { role: string }) => m.role === "user")?.content ?? "");
const toolResults = (req: ProviderRequest) =>
  (req.body.messages as Array<{ role: string; content: string }>).filter((m) => m.role === "tool");
const never = new Promise<void>(() => {});
const READ = "cat /workspace/notes.txt || echo no-notes";

describe.skipIf(!canRun)("conversation workspaces: a conversation's next job starts from its workspace", () => {
  const t = useProviderStack(
    (req) => {
      const which = caseOf(req);
      const done = toolResults(req).length;
      const write = /^write:(.+)$/.exec(which);
      if (write) {
        if (done === 0)
          return {
            kind: "stream",
            toolCalls: [{ id: "w", name: "shell", args: { command: `echo ${write[1]} > /workspace/notes.txt` } }],
          };
        // "write:…-hang": the turn after the write never ends (the job is cancelled there).
        if (which.endsWith("-hang")) return { kind: "stream", pieces: ["thinking"], until: never };
        return { kind: "stream", pieces: ["written"] };
      }
      // "steps:cmd1;;cmd2…": one shell call per command, then the last result.
      const steps = /^steps:(.+)$/.exec(which)?.[1]?.split(";;");
      if (steps) {
        const command = steps[done];
        if (command !== undefined)
          return { kind: "stream", toolCalls: [{ id: `s${done}`, name: "shell", args: { command } }] };
        return { kind: "stream", pieces: [`saw: ${toolResults(req).at(-1)?.content}`] };
      }
      if (which === "read") {
        if (done === 0) return { kind: "stream", toolCalls: [{ id: "r", name: "shell", args: { command: READ } }] };
        return { kind: "stream", pieces: [`saw: ${toolResults(req).at(-1)?.content}`] };
      }
      return { kind: "stream", pieces: ["no tools needed"] };
    },
    () => ({ hosts: 1 }),
  );
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const jobs = agentJobs<Job>(api, () => "fake-model");
  const eventsOf = async (id: string) => (await api().events(id)).map((e: SseEvent) => JSON.parse(e.data));
  const run = async (agent: string, conversation: string, content: string) => {
    const id = await jobs.submit(agent, {
      conversation_id: conversation,
      input: { messages: [{ role: "user", content }] },
    });
    const job = await jobs.finished(id, 90_000);
    expect(job.state, JSON.stringify(job)).toBe("completed");
    return job;
  };

  it("job 2 of a conversation reads what job 1 wrote; another conversation and a run workspace do not", async () => {
    await jobs.defineAgent("cw-conv", { tools: ["shell"], workspace: "conversation" });
    await jobs.defineAgent("cw-run", { tools: ["shell"] });
    const agent = await api().call<{ agent: { workspace: string } }>("GET", "/v1/agents/cw-run");
    expect(agent.body.agent.workspace, JSON.stringify(agent.body)).toBe("run");

    const first = await run("cw-conv", "conv-a", "write:conv-note-7");
    const snaps = await t.pool.query("SELECT payload FROM job_journal WHERE job_id = $1 AND kind = 'snapshot'", [
      first.id,
    ]);
    expect(snaps.rowCount).toBe(1);

    // A job that calls no tool makes no sandbox, and leaves the conversation's workspace as it was.
    const textOnly = await run("cw-conv", "conv-a", "hello");
    expect((await eventsOf(textOnly.id)).some((e) => e.type === "sandbox.created")).toBe(false);

    const second = await run("cw-conv", "conv-a", "read");
    expect(second.output).toContain("conv-note-7");
    expect(second.output).not.toContain("no-notes");

    const other = await run("cw-conv", "conv-b", "read");
    expect(other.output).toContain("no-notes");
    expect(other.output).not.toContain("conv-note-7");

    const runWorkspace = await run("cw-run", "conv-a", "read");
    expect(runWorkspace.output).toContain("no-notes");
    expect(runWorkspace.output).not.toContain("conv-note-7");
    // The run agent's own (empty) step snapshot is not the conversation's: the next job still sees the note.
    const after = await run("cw-conv", "conv-a", "read");
    expect(after.output).toContain("conv-note-7");
  }, 300_000);

  it("a conversation's workspace is a chain across jobs: the next job restores it, adds its diff, and journals every link", async () => {
    await jobs.defineAgent("cw-chain", { tools: ["shell"], workspace: "conversation" });
    const first = await run("cw-chain", "conv-d", "steps:echo one > a.txt;;echo two > b.txt");
    const second = await run("cw-chain", "conv-d", "steps:rm a.txt && echo three > c.txt");
    const rowsOf = async (id: string) =>
      (
        await t.pool.query<{ payload: { sha256: string; base?: Array<{ sha256: string }> } }>(
          "SELECT payload FROM job_journal WHERE job_id = $1 AND kind = 'snapshot' ORDER BY seq",
          [id],
        )
      ).rows.map((r) => ({ sha256: r.payload.sha256, base: (r.payload.base ?? []).map((l) => l.sha256) }));
    const a = await rowsOf(first.id);
    // Job 1: a full snapshot, then a diff on it.
    expect(a).toEqual([
      { sha256: a[0]?.sha256, base: [] },
      { sha256: a[1]?.sha256, base: [a[0]?.sha256] },
    ]);
    // Job 2: job 1's chain, each link a row of its own (kept when job 1 is purged), then its diff on it.
    const b = await rowsOf(second.id);
    expect(b.slice(0, 2)).toEqual(a);
    expect(b[2]?.base).toEqual([a[0]?.sha256, a[1]?.sha256]);
    expect(b).toHaveLength(3);
    const third = await run("cw-chain", "conv-d", "steps:find . -type f | sort; cat b.txt c.txt");
    const saw = JSON.parse((third.output ?? "").replace(/^saw: /, "")) as { stdout: string };
    expect(saw.stdout, third.output ?? "").toBe("./b.txt\n./c.txt\ntwo\nthree\n");
  }, 300_000);

  it("a job cancelled mid-run (interrupt) leaves its last snapshot to the conversation's next job", async () => {
    await jobs.defineAgent("cw-cut", { tools: ["shell"], workspace: "conversation" });
    await run("cw-cut", "conv-c", "write:older-note");
    const id = await jobs.submit("cw-cut", {
      conversation_id: "conv-c",
      input: { messages: [{ role: "user", content: "write:newer-note-hang" }] },
    });
    await waitFor(
      "the turn after the write",
      async () =>
        t.provider.requests.some((r) => caseOf(r) === "write:newer-note-hang" && toolResults(r).length === 1) || null,
      { timeoutMs: 90_000, intervalMs: 20 },
    );
    const cancelled = await api().call<{ status: string }>("POST", `/v1/jobs/${id}/cancel`);
    expect(cancelled.status, JSON.stringify(cancelled.body)).toBe(202);
    const cut = await jobs.finished(id, 60_000);
    expect(cut.state).toBe("cancelled");
    const next = await run("cw-cut", "conv-c", "read");
    expect(next.output).toContain("newer-note");
    expect(next.output).not.toContain("older-note");
  }, 300_000);
});

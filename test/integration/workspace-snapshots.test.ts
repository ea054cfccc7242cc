/**
 * Workspace snapshots at step boundaries (docs/sandboxes.md "Workspace snapshots"), on the real
 * stack with real Docker sandboxes and a provider of the test's own: a file a shell call wrote is
 * still there after its host is SIGKILLed during the next step and another host recovers the job
 * (`run.recovered.sandbox_reset` false, the model never told of a reset); a recovery applies a
 * chain of a full snapshot and diffs (a deletion, a same-size rewrite) into exactly the tree the
 * run left; an approval-gated call sees, after the wait, the files the run had before it.
 */
import { describe, expect, it } from "vitest";
import type { SseEvent } from "../../tools/lib/sse";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import { requireDocker } from "../helpers/docker";
import type { ProviderRequest } from "../helpers/fake-provider";
import { useProviderStack } from "../helpers/provider-stack";
import { requireBinary } from "../helpers/require";
import { FAST_LOSS_HOST_ENV } from "../helpers/stack";

const canRun =
  (await requireDocker()) !== null && (await requireBinary("redis-server", "apt-get install redis-server"));

interface Job {
  id: string;
  state: string;
  output: string | null;
  recoveries: number;
  waiting_for: { call_id: string } | null;
}

const caseOf = (req: ProviderRequest): string =>
  String(req.body.messages.find((m: { role: string }) => m.role === "user")?.content ?? "");
const toolResults = (req: ProviderRequest) =>
  (req.body.messages as Array<{ role: string; content: string }>).filter((m) => m.role === "tool");
const never = new Promise<void>(() => {});

describe.skipIf(!canRun)("workspace snapshots: the workspace outlives its host and a wait", () => {
  const held = new Set<string>();
  const t = useProviderStack(
    (req) => {
      const which = caseOf(req);
      const done = toolResults(req).length;
      if (which === "case:kill") {
        if (done === 0)
          return {
            kind: "stream",
            toolCalls: [{ id: "w", name: "shell", args: { command: "echo kept-42 > data.txt" } }],
          };
        if (done === 1) {
          // The next step after the write: the first execution's turn hangs here (its host is killed).
          if (!held.has(which)) {
            held.add(which);
            return { kind: "stream", pieces: ["doomed"], until: never };
          }
          return { kind: "stream", toolCalls: [{ id: "r", name: "shell", args: { command: "cat data.txt" } }] };
        }
        return { kind: "stream", pieces: [`saw: ${toolResults(req).at(-1)?.content}`] };
      }
      if (which === "case:chain") {
        // A full snapshot (a.txt beside 200 kB that do not compress), then two diffs: b.txt added,
        // then a.txt deleted and b.txt rewritten to the same size (only its ctime tells).
        const steps = [
          "head -c 200000 /dev/urandom > bulk.bin && echo alpha > a.txt && md5sum bulk.bin",
          "echo beta-1 > b.txt",
          "rm a.txt && echo beta-2 > b.txt",
        ];
        const command = steps[done];
        if (command !== undefined)
          return { kind: "stream", toolCalls: [{ id: `s${done}`, name: "shell", args: { command } }] };
        if (done === steps.length) {
          if (!held.has(which)) {
            held.add(which);
            return { kind: "stream", pieces: ["doomed"], until: never };
          }
          return {
            kind: "stream",
            toolCalls: [{ id: "r", name: "shell", args: { command: "find . | sort; cat b.txt; md5sum bulk.bin" } }],
          };
        }
        return {
          kind: "stream",
          pieces: [JSON.stringify([toolResults(req)[0]?.content, toolResults(req).at(-1)?.content])],
        };
      }
      if (which === "case:wait") {
        if (done === 0)
          return {
            kind: "stream",
            toolCalls: [{ id: "w", name: "write_file", args: { path: "notes/a.txt", content: "before-the-wait" } }],
          };
        if (done === 1)
          return {
            kind: "stream",
            toolCalls: [{ id: "l", name: "shell", args: { command: "find . -type f | sort" } }],
          };
        if (done === 2)
          return {
            kind: "stream",
            toolCalls: [{ id: "g", name: "shell", args: { command: "find . -type f | sort; cat notes/a.txt" } }],
          };
        return { kind: "stream", pieces: [`saw: ${toolResults(req).at(-1)?.content}`] };
      }
      return { kind: "stream", pieces: ["?"] };
    },
    () => ({ hosts: 2, hostEnv: { ...FAST_LOSS_HOST_ENV } }),
  );
  const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
  const jobs = agentJobs<Job>(api, () => "fake-model");
  const eventsOf = async (id: string) => (await api().events(id)).map((e: SseEvent) => JSON.parse(e.data));

  it("a file a shell call wrote is there after its host is SIGKILLed during the next step (sandbox_reset false)", async () => {
    await jobs.defineAgent("ws-kill", { tools: ["shell"] });
    const id = await jobs.submit("ws-kill", { input: { messages: [{ role: "user", content: "case:kill" }] } });
    await waitFor(
      "the turn after the write to start",
      async () => t.provider.requests.some((r) => caseOf(r) === "case:kill" && toolResults(r).length === 1) || null,
      { timeoutMs: 60_000, intervalMs: 20 },
    );
    // The snapshot row is journaled after the write's result, before that turn was asked.
    const snap = await t.pool.query("SELECT payload FROM job_journal WHERE job_id = $1 AND kind = 'snapshot'", [id]);
    expect(snap.rowCount).toBe(1);
    const killedAt = Date.now();
    await t.killOwner(id);
    const job = await jobs.finished(id, 90_000);
    console.log(`[workspace] SIGKILL → completed in ${Date.now() - killedAt} ms`);
    expect(job, JSON.stringify(job)).toMatchObject({ state: "completed", recoveries: 1 });
    expect(job.output).toContain("kept-42");
    const events = await eventsOf(id);
    const recovered = events.find((e) => e.type === "run.recovered");
    expect(recovered?.payload).toMatchObject({ reason: "host_lost", sandbox_reset: false });
    // The model was not told of a reset: no runtime note in anything it was sent.
    for (const r of t.provider.requests.filter((q) => caseOf(q) === "case:kill")) {
      expect(JSON.stringify(r.body.messages)).not.toContain("[runtime note]");
    }
  }, 180_000);

  it("a recovery applies the chain: a full snapshot, then diffs with a deletion and a same-size rewrite", async () => {
    await jobs.defineAgent("ws-chain", { tools: ["shell"] });
    const id = await jobs.submit("ws-chain", { input: { messages: [{ role: "user", content: "case:chain" }] } });
    await waitFor(
      "the turn after the last write to start",
      async () => t.provider.requests.some((r) => caseOf(r) === "case:chain" && toolResults(r).length === 3) || null,
      { timeoutMs: 90_000, intervalMs: 20 },
    );
    const rows = await t.pool.query<{ payload: { sha256: string; bytes: number; base?: Array<{ sha256: string }> } }>(
      "SELECT payload FROM job_journal WHERE job_id = $1 AND kind = 'snapshot' ORDER BY seq",
      [id],
    );
    const [full, added, changed] = rows.rows.map((r) => r.payload);
    expect(rows.rowCount, JSON.stringify(rows.rows)).toBe(3);
    expect(full?.base).toBeUndefined();
    expect(full?.bytes).toBeGreaterThan(200_000);
    // Each diff names its chain, the full first, and holds only what changed.
    expect(added?.base?.map((l) => l.sha256)).toEqual([full?.sha256]);
    expect(changed?.base?.map((l) => l.sha256)).toEqual([full?.sha256, added?.sha256]);
    for (const diff of [added, changed]) expect(diff?.bytes).toBeLessThan(2_000);
    console.log(`[workspace] chain bytes: full ${full?.bytes}, diffs ${added?.bytes}, ${changed?.bytes}`);
    await t.killOwner(id);
    const job = await jobs.finished(id, 90_000);
    expect(job, JSON.stringify(job)).toMatchObject({ state: "completed", recoveries: 1 });
    // The first and the last shell results, each the tool's JSON ({stdout, …}).
    const [first, last] = (JSON.parse(job.output ?? "[]") as string[]).map((c) => JSON.parse(c) as { stdout: string });
    const md5 = /^([0-9a-f]{32}) {2}bulk\.bin$/m.exec(first?.stdout ?? "")?.[1];
    expect(md5, job.output ?? "").toBeDefined();
    // Exactly the tree the run left: no a.txt, b.txt's second content, the bulk file's bytes.
    expect(last?.stdout, job.output ?? "").toBe(`.\n./b.txt\n./bulk.bin\nbeta-2\n${md5}  bulk.bin\n`);
    const events = await eventsOf(id);
    expect(events.find((e) => e.type === "run.recovered")?.payload).toMatchObject({ sandbox_reset: false });
  }, 180_000);

  it("an approval-gated call sees after the wait the files the run had before it", async () => {
    await jobs.defineAgent("ws-wait", { tools: ["write_file", { name: "shell", requires_approval: true }] });
    // write_file (ungated) writes before any wait; both shell calls are gated, so the run waits
    // twice, its sandbox removed at each suspend, and each resume is a new sandbox.
    const id = await jobs.submit("ws-wait", { input: { messages: [{ role: "user", content: "case:wait" }] } });
    const before: string[] = [];
    for (let wait = 0; wait < 2; wait++) {
      const w = await jobs.waiting(id, 60_000);
      const decided = await api().call("POST", `/v1/jobs/${id}/approvals/${w.waiting_for?.call_id}`, {
        decision: "approve",
      });
      expect(decided.status, JSON.stringify(decided.body)).toBe(202);
      if (wait === 0) {
        // The listing's result arrives after this resume; wait for the next wait (the second call).
        await waitFor(
          "the listing's result",
          async () => t.provider.requests.find((r) => caseOf(r) === "case:wait" && toolResults(r).length === 2) ?? null,
          { timeoutMs: 60_000, intervalMs: 50 },
        ).then((r) => before.push(String(toolResults(r).at(-1)?.content)));
      }
    }
    const job = await jobs.finished(id, 60_000);
    expect(job.state, JSON.stringify(job)).toBe("completed");
    // Each wait ended its sandbox; each resume restored the workspace: the same file both times.
    expect(before[0]).toContain("./notes/a.txt");
    expect(job.output).toContain("./notes/a.txt");
    expect(job.output).toContain("before-the-wait");
    const events = await eventsOf(id);
    expect(events.filter((e) => e.type === "run.resumed")).toHaveLength(2);
  }, 180_000);
});

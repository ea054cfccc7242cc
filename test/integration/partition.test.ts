/**
 * A host cut off from Postgres while its run goes on (a partition, not a crash: the process keeps
 * running, its heartbeats fail). Failing heartbeats are "unknown", not "lost", so the host keeps
 * the run going; but once the lost bound has passed since its last acknowledged heartbeat was
 * sent, another host's reaper may hand the job on, and from then on this run must be doing
 * nothing. The run stops itself (self-fence) one heartbeat period before that moment, on the
 * monotonic clock. Checked here with real hosts: the self-fence comes before the job leaves the
 * partitioned host, the row never comes back to it after the partition heals, and the host
 * goes on to run other work.
 */
import { randomUUID } from "node:crypto";
import { expect, it } from "vitest";
import { sleep } from "../../src/domain/async";
import { ChaosProxy } from "../../tools/chaos/pg-chaos-proxy";
import { waitFor } from "../../tools/stack/services/ports";
import { type HostHandle, spawnHost } from "../../tools/stack/start";
import { apiClient, userMessage } from "../helpers/api";
import { FAST_LOSS_HOST_ENV, useStack } from "../helpers/stack";

const t = useStack({ hosts: 0, mockModel: { ttftMs: 5, tokensPerS: 2000 } });

type Job = { id: string; state: string; output: string | null };
const api = () => apiClient(t.stack.gatewayUrl, t.stack.apiKey);
async function submit(content: string): Promise<string> {
  const r = await api().call<{ job: Job }>("POST", "/v1/jobs", userMessage(content));
  expect(r.status, JSON.stringify(r.body)).toBe(202);
  return r.body.job.id;
}
const inState = (id: string, states: string[], timeoutMs: number) =>
  waitFor(
    `job ${id} in ${states.join("/")}`,
    async () => {
      const j = (await api().call<{ job: Job }>("GET", `/v1/jobs/${id}`)).body.job;
      return states.includes(j.state) ? j : null;
    },
    { timeoutMs },
  );

it("a host partitioned from Postgres past the lost bound stops its run before the job is handed on", async () => {
  const { stack, pool } = t;
  const pgUrl = new URL(stack.databaseUrl);
  const proxy = new ChaosProxy({
    target: { host: pgUrl.hostname, port: Number(pgUrl.port) },
    claimDelayMs: 0,
    startDelayMs: 0,
  });
  const via = new URL(stack.databaseUrl);
  via.port = String(await proxy.listen());
  const lines: Array<{ at: number; line: string }> = [];
  const hosts: HostHandle[] = [];
  try {
    const a = await spawnHost(
      process.cwd(),
      stack.hostEnv({
        ...FAST_LOSS_HOST_ENV,
        DATABASE_URL: via.toString(),
        HOST_ID: `part-a-${randomUUID().slice(0, 6)}`,
      }),
      (_src, line) => lines.push({ at: Date.now(), line }),
    );
    hosts.push(a);
    // ~30 s of streaming: far longer than the partition.
    const slow = `!mock ${JSON.stringify({ reply: "word ".repeat(150), ttft_ms: 5, tokens_per_s: 5 })}`;
    const id = await submit(slow);
    await inState(id, ["running"], 20_000);
    const owner = async () =>
      (await pool.query<{ owner: string | null; state: string }>("SELECT owner, state FROM jobs WHERE id = $1", [id]))
        .rows[0];
    expect((await owner())?.owner).toBe(a.id);

    // A second host, whose reaper will find A's run silent.
    hosts.push(
      await spawnHost(
        process.cwd(),
        stack.hostEnv({ ...FAST_LOSS_HOST_ENV, HOST_ID: `part-b-${randomUUID().slice(0, 6)}` }),
      ),
    );

    const cutAt = Date.now();
    proxy.pause();
    // Watch, every 50 ms, for the row to leave A (reaped: lost, or re-queued for a new execution).
    let leftAt = 0;
    while (Date.now() - cutAt < 12_000) {
      const r = await owner();
      if (r && !(r.state === "running" && r.owner === a.id)) {
        leftAt = Date.now();
        break;
      }
      await sleep(50);
    }
    const fence = lines.find((l) => l.at >= cutAt && l.line.includes("self-fence"));
    console.log(
      `partition: self-fence ${fence ? `${fence.at - cutAt} ms` : "never"} after the cut, row left host A ${leftAt ? `${leftAt - cutAt} ms` : "never"} after it`,
    );
    expect(leftAt).toBeGreaterThan(0);
    expect(fence).toBeDefined();
    // The host's own clock stamp of the fence against Postgres' of the hand-off (one machine,
    // one wall clock): the reaper ends A's execution in the statement that takes the job off it.
    const fencedAt = Date.parse((JSON.parse(fence!.line) as { ts: string }).ts);
    const ended = await pool.query<{ finished_at: Date | null }>(
      "SELECT finished_at FROM executions WHERE job_id = $1 AND host = $2",
      [id, a.id],
    );
    const handedOnAt = ended.rows[0]?.finished_at?.getTime();
    expect(handedOnAt, "A's execution ended by the reaper").toBeDefined();
    console.log(`partition: fenced ${handedOnAt! - fencedAt} ms before the hand-off`);
    expect(fencedAt).toBeLessThan(handedOnAt!);
    // Keep A cut off a while longer, then heal: whatever A had queued reaches Postgres now.
    await sleep(1500);
    proxy.resume();
    await sleep(2500);
    const after = await owner();
    expect(after?.owner === a.id && after?.state === "running").toBe(false);
    const accepted = await pool.query<{ n: string }>(
      "SELECT count(*) AS n FROM executions WHERE job_id = $1 AND host = $2 AND finished_at IS NOT NULL AND outcome = 'completed'",
      [id, a.id],
    );
    expect(Number(accepted.rows[0]?.n)).toBe(0);

    // Healed, A is a working host again: it runs a job through to the end.
    await hosts[1]!.stop();
    hosts.pop();
    const quick = await submit(`!mock ${JSON.stringify({ reply: "back" })}`);
    const done = await inState(quick, ["completed"], 30_000);
    expect(done.output).toBe("back");
  } finally {
    for (const h of hosts) await h.stop().catch(() => {});
    await proxy.close();
  }
}, 120_000);

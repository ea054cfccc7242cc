/**
 * The stream never disagrees with Postgres after a crash: a host SIGKILLed right after its
 * started CAS, before its outbox delivered anything (its gateway is a black hole that accepts
 * connections and never answers, so `run.started` dies in the host's memory), leaves a job that
 * Postgres says started and was lost. The stream must say the same, in order: `run.started`,
 * then `run.lost`, both projected from Postgres.
 */
import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readSse, type SseEvent } from "../../tools/lib/sse";
import type { HostHandle } from "../../tools/stack/start";
import { apiClient, longRunMessage } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { FAST_LOSS_HOST_ENV, useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

/** A "gateway" that takes connections and never answers: nothing a host sends gets delivered. */
async function blackHole(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => {});
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe.skipIf(!canRun)("lifecycle facts Postgres holds reach the stream", () => {
  let hole: Awaited<ReturnType<typeof blackHole>>;

  beforeAll(async () => {
    hole = await blackHole();
  });
  afterAll(async () => {
    await hole?.close();
  });
  const t = useStack({ hosts: 0, mockModel: { ttftMs: 5, tokensPerS: 2000 }, hostEnv: FAST_LOSS_HOST_ENV });

  it("a host killed right after its started CAS, events undelivered: the stream shows run.started, then run.lost", async () => {
    const doomed: HostHandle = await t.stack.addHost({ GATEWAY_URL: hole.url });
    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    const submit = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", longRunMessage());
    expect(submit.status).toBe(202);
    const jobId = submit.body.job.id;
    // Its recoveries used up (the default allows 3), so the reaper ends it `lost`, not recovered (recovery.test.ts has those).
    await t.pool.query("UPDATE jobs SET recoveries = 3 WHERE id = $1", [jobId]);

    // The started CAS committed (Postgres: running, execution_started_at set) …
    const until = Date.now() + 30_000;
    let row: { state: string; owner: string; execution_id: string | null } | undefined;
    while (Date.now() < until) {
      row = (await t.pool.query("select state, owner, execution_id from jobs where id = $1", [jobId])).rows[0];
      if (row?.state === "running") break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(row?.state).toBe("running");
    expect(row?.owner).toBe(doomed.id);
    // … and the host dies with its run.started undelivered (its gateway never answered).
    doomed.process.kill("SIGKILL");

    // A surviving host's reaper declares the run lost in Postgres.
    await t.stack.addHost();
    const events: SseEvent[] = [];
    for await (const ev of readSse(`${t.stack.gatewayUrl}/v1/jobs/${jobId}/events`, {
      headers: { authorization: `Bearer ${t.stack.apiKey}` },
      signal: AbortSignal.timeout(60_000),
    })) {
      events.push(ev);
    }
    const final = (await t.pool.query("select state, execution_id from jobs where id = $1", [jobId])).rows[0];
    expect(final.state).toBe("lost");
    const seen = events.map((e) => {
      const data = JSON.parse(e.data) as { execution_id: string; payload: { source?: string } };
      return [Number(e.id), e.event, data.execution_id, data.payload.source];
    });
    expect(seen).toEqual([
      [1, "run.started", final.execution_id, "projector"],
      [2, "run.lost", final.execution_id, "projector"],
    ]);
  });
});

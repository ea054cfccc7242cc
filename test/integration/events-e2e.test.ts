import { describe, expect, it } from "vitest";
import { EarClient } from "../../src/client/client";
import type { StreamedEvent } from "../../src/client/events";
import { apiClient, longRunMessage } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { FAST_LOSS_HOST_ENV, useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

describe.skipIf(!canRun)("event stream when a host dies", () => {
  const t = useStack({ hosts: 2, mockModel: { ttftMs: 5, tokensPerS: 2000 }, hostEnv: FAST_LOSS_HOST_ENV });

  it("a host SIGKILLed mid-stream: the SSE stream ends with run.lost once the reaper declares it lost", async () => {
    const api = apiClient(t.stack.gatewayUrl, t.stack.apiKey);
    const submit = await api.call<{ job: { id: string } }>("POST", "/v1/jobs", longRunMessage());
    const jobId = submit.body.job.id;
    // Its recoveries used up (the default allows 3), so the reaper ends it `lost`, not recovered (recovery.test.ts has those).
    await t.pool.query("UPDATE jobs SET recoveries = 3 WHERE id = $1", [jobId]);
    const events: StreamedEvent[] = [];
    let killedAt = 0;
    let killed: string | null = null;
    const client = new EarClient({ baseUrl: t.stack.gatewayUrl, credential: t.stack.apiKey });
    for await (const ev of client.events(jobId, { signal: AbortSignal.timeout(30_000) })) {
      events.push(ev);
      if (!killed && ev.event.type === "model.delta") {
        const owner = (await t.pool.query("select owner from jobs where id = $1", [jobId])).rows[0]?.owner as string;
        const host = t.stack.hosts.find((h) => h.id === owner);
        expect(host, `owner ${owner} is one of this stack's hosts`).toBeDefined();
        host?.process.kill("SIGKILL");
        killed = owner;
        killedAt = Date.now();
      }
    }
    expect(killed).not.toBeNull();
    const types = events.map((e) => e.event.type);
    expect(types.at(-1)).toBe("run.lost");
    expect(types.filter((t) => t.startsWith("run.") && t !== "run.started" && t !== "run.prepared")).toEqual([
      "run.lost",
    ]);
    expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i + 1));
    expect(events.at(-1)?.event).toMatchObject({ job_id: jobId, payload: { source: "projector" } });
    const row = (await t.pool.query("select state from jobs where id = $1", [jobId])).rows[0];
    expect(row.state).toBe("lost");
    console.log(`[events e2e] SIGKILL → run.lost on the stream after ${Date.now() - killedAt} ms`);

    // A reconnect after the end replays the same stream, terminal included, and closes.
    const replay = await api.events(jobId);
    expect(replay.map((e) => JSON.parse(e.data))).toEqual(events.map((e) => e.event));
  });
});

/**
 * One tenant's regex must not freeze a shared host, whose other tenants' runs would stop heartbeating. An agent whose
 * response_format is `{"type":"string","pattern":"(a+)+$"}` answered with 30 `a` and a `!`
 * backtracks for minutes in JavaScript's matcher. Through the real stack (gateway in workerd,
 * Postgres, Redis, one sandbox-host, the mock model) the host's `/healthz` keeps answering in
 * under 1 s during the attack, another tenant's job running on the same host completes, and the
 * attacker's job fails `output_invalid` saying the schema check timed out.
 */
import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import type { JobView } from "../../src/contracts/job";
import * as schema from "../../src/db/schema";
import { createApiKey, createTenant } from "../../src/db/tenants-repo";
import { waitFor } from "../../tools/stack/services/ports";
import { agentJobs, apiClient } from "../helpers/api";
import { requireBinary } from "../helpers/require";
import { useStack } from "../helpers/stack";

const canRun = await requireBinary("redis-server", "apt-get install redis-server");

describe.skipIf(!canRun)("a tenant's backtracking regex on a shared host", () => {
  const t = useStack({ hosts: 1, mockModel: { ttftMs: 5, tokensPerS: 2000 } });

  async function tenantApi(id: string) {
    const db = drizzle(t.pool, { schema });
    await createTenant(db, id, id);
    const key = (await createApiKey(db, id, "regex test")).key;
    const api = apiClient(t.stack.gatewayUrl, key);
    return {
      api,
      ...agentJobs<JobView>(
        () => api,
        () => t.stack.modelName,
      ),
    };
  }

  it("keeps /healthz under 1 s and another tenant's job completing; the attacker's job fails output_invalid", async () => {
    const attacker = await tenantApi("regex-attacker");
    const victim = await tenantApi("regex-victim");
    await attacker.defineAgent("backtracker", { response_format: { type: "string", pattern: "(a+)+$" } });
    await victim.defineAgent("plain", {});

    // The victim's job streams for ~3 s, so it is running on the host when the attack lands.
    const words = Array.from({ length: 30 }, (_, i) => `v${i}`).join(" ");
    const victimJob = await victim.submit("plain", {
      input: { messages: [{ role: "user", content: `!mock ${JSON.stringify({ reply: words, tokens_per_s: 10 })}` }] },
    });
    await waitFor(
      "the victim's job to run",
      async () => ((await victim.job(victimJob)).state === "running" ? true : null),
      {
        timeoutMs: 30_000,
        intervalMs: 50,
      },
    );

    const evil = JSON.stringify(`${"a".repeat(30)}!`);
    const attackJob = await attacker.submit("backtracker", {
      input: { messages: [{ role: "user", content: `!mock ${JSON.stringify({ reply: evil })}` }] },
    });

    // Probe the host's liveness endpoint the whole time the attack job is live.
    const healthz = new URL("/healthz", t.stack.hosts[0]!.metricsUrl).href;
    const probes: number[] = [];
    const failures: string[] = [];
    let attackEnded: JobView | null = null;
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      const t0 = performance.now();
      try {
        const res = await fetch(healthz, { signal: AbortSignal.timeout(1000) });
        await res.text();
        if (res.status !== 200) failures.push(`status ${res.status}`);
      } catch (err) {
        failures.push(String(err));
      }
      probes.push(performance.now() - t0);
      const j = await attacker.job(attackJob);
      if (!["queued", "running"].includes(j.state)) {
        attackEnded = j;
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(failures, `healthz probes that failed (of ${probes.length})`).toEqual([]);
    expect(Math.max(...probes)).toBeLessThan(1000);
    expect(attackEnded?.state).toBe("failed");
    expect(attackEnded?.error?.code).toBe("output_invalid");
    expect(attackEnded?.error?.message).toMatch(/schema check timed out/);

    const v = await victim.finished(victimJob);
    expect({ state: v.state, output: v.output }).toEqual({ state: "completed", output: words });

    // The pool's thread was freed with the runaway: the same agent still answers a benign reply.
    const again = await attacker.submit("backtracker", {
      input: { messages: [{ role: "user", content: `!mock ${JSON.stringify({ reply: JSON.stringify("aaaa") })}` }] },
    });
    const benign = await attacker.finished(again);
    expect({ state: benign.state, error: benign.error }).toEqual({ state: "completed", error: null });
  }, 120_000);
});

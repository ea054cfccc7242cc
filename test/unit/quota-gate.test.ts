/**
 * The holder-side lease rule at a model call: a lease past its local deadline stops that call
 * (never the run: the turn is asked again, model-call.ts) and is counted in
 * quota_leases_lost_total, like one a renewal found purged (docs/observability.md documents
 * both). An acquire answered past the deadline on a loaded machine once failed runs
 * `quota_lease_lost` while that counter stayed 0.
 */
import { Counter, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { leaseRanOut } from "../../sandbox-host/runner/quota-gate";
import { ActiveRun, Execution, type RunDeps } from "../../sandbox-host/runner/run-context";
import type { ExecutionIdentity } from "../../src/domain/identity";

const id: ExecutionIdentity = { jobId: "j", host: "h", epoch: 1, token: "t", executionId: "e" };
const lease = { holder: "e:1" } as never;

function setup(valid: boolean) {
  const registry = new Registry();
  const lost = new Counter({ name: "quota_leases_lost_total", help: "h", registers: [registry] });
  const warnings: string[] = [];
  const deps = {
    quota: { store: { isValid: () => valid } },
    metrics: { quotaLeasesLost: lost },
    log: { warn: (m: string) => warnings.push(m) },
  } as unknown as RunDeps;
  const run = new ActiveRun(id).start();
  const exec = (d: RunDeps) => new Execution({ deps: d, run, emit: () => {}, job: {} as never });
  return { deps, exec, run, registry, warnings };
}

const counted = async (registry: Registry) =>
  (await registry.getSingleMetric("quota_leases_lost_total")?.get())?.values[0]?.value ?? 0;

describe("leaseRanOut", () => {
  it("a lease past its deadline is lost and counted, and the run goes on (its turn is asked again)", async () => {
    const { deps, exec, run, registry, warnings } = setup(false);
    expect(leaseRanOut(exec(deps), lease)).toBe(true);
    expect(run.abortReason).toBeNull();
    expect(run.abort.signal.aborted).toBe(false);
    expect(await counted(registry)).toBe(1);
    expect(warnings).toHaveLength(1);
  });

  it("a valid lease, no lease, or no quota at all: nothing stops and nothing is counted", async () => {
    const { deps, exec, run, registry } = setup(true);
    expect(leaseRanOut(exec(deps), lease)).toBe(false);
    expect(leaseRanOut(exec(deps), null)).toBe(false);
    expect(leaseRanOut(exec({ ...deps, quota: undefined }), lease)).toBe(false);
    expect(run.abortReason).toBeNull();
    expect(await counted(registry)).toBe(0);
  });
});

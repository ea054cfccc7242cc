/**
 * Many sandboxes against a real Docker engine: distinct subnets under concurrency, pool
 * exhaustion, a subnet taken by someone else between scan and create, the per-run lock, and
 * orphan removal at host start. Each case uses its own host id and its own slice of 10.253.244.0/22
 * ... 10.253.251.0/24 (the other sandbox suite uses 10.253.240.0/22 and runs at the same time).
 */
import { afterAll, describe, expect, it } from "vitest";
import type { Docker } from "../../sandbox-host/sandbox/docker";
import { noKeyedLock } from "../../sandbox-host/sandbox/keyed-lock";
import { createSandboxManager, LABEL_HOST, type SandboxManagerOptions } from "../../sandbox-host/sandbox/manager";
import { SandboxPoolExhausted } from "../../sandbox-host/sandbox/sandbox-errors";
import { overlaps, parseCidr } from "../../sandbox-host/sandbox/subnet";
import { countHostObjects, removeHostObjects, requireDocker, TEST_IMAGE, testHostId } from "../helpers/docker";

const docker = await requireDocker();

describe.skipIf(!docker)("sandbox pool, lock and orphans", () => {
  const hosts: string[] = [];
  const manager = (suite: string, o: Partial<SandboxManagerOptions> & { pool: string }) => {
    const hostId = testHostId(suite);
    hosts.push(hostId);
    return { hostId, m: createSandboxManager({ docker: docker!, hostId, image: TEST_IMAGE, ...o }) };
  };

  afterAll(async () => {
    if (docker) for (const h of hosts) await removeHostObjects(docker, h);
  });

  it("50 concurrent sandboxes get 50 distinct subnets, and all are gone afterwards", { timeout: 180_000 }, async () => {
    const pool = "10.253.244.0/22";
    // All 50 creations in flight at once (a host admits 2 by default): the subnet picks race.
    const { hostId, m } = manager("fifty", { pool, createConcurrency: 50 });
    const runs = Array.from({ length: 50 }, (_, i) => `run-${i}`);
    const t0 = performance.now();
    const sbs = await Promise.all(runs.map((r) => m.ensure(r)));
    const createAll = performance.now() - t0;
    const subnets = new Set(sbs.map((s) => s.subnet));
    expect(subnets.size).toBe(50);
    const poolCidr = parseCidr(pool)!;
    for (const s of subnets) expect(overlaps(parseCidr(s)!, poolCidr)).toBe(true);
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 50, networks: 50 });
    const running = await docker!.listContainers({ filters: JSON.stringify({ label: [`${LABEL_HOST}=${hostId}`] }) });
    expect(running).toHaveLength(50);

    const t1 = performance.now();
    const removed = await Promise.all(runs.map((r) => m.destroy(r)));
    const deleteAll = performance.now() - t1;
    expect(removed.every((r) => r.containers === 1 && r.networks === 1)).toBe(true);
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 0, networks: 0 });
    const createMs = sbs.map((s) => s.createMs).sort((a, b) => a - b);
    console.log(
      `50 concurrent: all created in ${Math.round(createAll)} ms (per sandbox p50 ${createMs[24]} ms, max ${createMs[49]} ms); all deleted in ${Math.round(deleteAll)} ms`,
    );
  });

  it("an exhausted pool is a clear SandboxPoolExhausted, and frees up after a destroy", async () => {
    const { hostId, m } = manager("exhaust", { pool: "10.253.248.0/26" }); // four /28s
    const held = await Promise.all(["a", "b", "c", "d"].map((r) => m.ensure(r)));
    const err = await m.ensure("e").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxPoolExhausted);
    expect(err).toMatchObject({ code: "pool_exhausted", runId: "e" });
    expect((err as Error).message).toContain("10.253.248.0/26");
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 4, networks: 4 });
    await m.destroy("b");
    const e = await m.ensure("e");
    // Concurrent ensures take subnets in any order: e gets exactly the one b freed.
    expect(e.subnet).toBe(held[1]?.subnet);
  });

  it("skips subnets held by networks it does not own, and rescans when one appears between scan and create", async () => {
    const pool = "10.253.249.0/26";
    const hostId = testHostId("conflict");
    hosts.push(hostId);
    const foreignLabels = { [LABEL_HOST]: hostId, purpose: "foreign" };
    // A network someone else made before we start: the scan must see it.
    await docker!.createNetwork({
      Name: `${hostId}-pre`,
      Internal: true,
      CheckDuplicate: true,
      IPAM: { Config: [{ Subnet: "10.253.249.0/28" }] },
      Labels: foreignLabels,
    });
    // And one that appears after our scan, on exactly the subnet we picked.
    const raced: string[] = [];
    const racing = new Proxy(docker!, {
      get(target, prop, receiver) {
        if (prop !== "createNetwork") return Reflect.get(target, prop, receiver);
        return async (o: Parameters<Docker["createNetwork"]>[0]) => {
          if (raced.length === 0) {
            const subnet = o.IPAM!.Config![0]!.Subnet!;
            raced.push(subnet);
            await target.createNetwork({
              Name: `${hostId}-race`,
              Internal: true,
              CheckDuplicate: true,
              IPAM: { Config: [{ Subnet: subnet }] },
              Labels: foreignLabels,
            });
          }
          return target.createNetwork(o);
        };
      },
    });
    const m = createSandboxManager({ docker: racing, hostId, image: TEST_IMAGE, pool });
    const sb = await m.ensure("r");
    // Picks are random among the free /28s (.16, .32, .48): the pre-existing .0 is never picked,
    // and the raced one is rescanned past.
    expect(raced).toHaveLength(1);
    expect(["10.253.249.16/28", "10.253.249.32/28", "10.253.249.48/28"]).toContain(raced[0]);
    expect(["10.253.249.16/28", "10.253.249.32/28", "10.253.249.48/28"]).toContain(sb.subnet);
    expect(sb.subnet).not.toBe(raced[0]);
    expect((await docker!.getNetwork(sb.networkId).inspect()).IPAM?.Config?.[0]?.Subnet).toBe(sb.subnet);
    await m.destroy("r");
    // Foreign networks are not the sandbox's to remove.
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 0, networks: 2 });
  });

  /**
   * ensure / destroy / ensure of one run, all started at once. With the lock they happen in
   * order: the first sandbox is created then removed, the second is the one that remains.
   */
  async function interleave(opts: { pool: string; lock?: typeof noKeyedLock }, rounds: number) {
    const { hostId, m } = manager("lock", opts);
    const outcomes: boolean[] = [];
    for (let i = 0; i < rounds; i++) {
      const run = `run-${i}`;
      const [a, d, b] = await Promise.allSettled([m.ensure(run), m.destroy(run), m.ensure(run)]);
      const left = await docker!.listContainers({
        all: true,
        filters: JSON.stringify({ label: [`${LABEL_HOST}=${hostId}`, `ear.sandbox.run=${run}`] }),
      });
      const nets = await docker!.listNetworks({
        filters: JSON.stringify({ label: [`${LABEL_HOST}=${hostId}`, `ear.sandbox.run=${run}`] }),
      });
      outcomes.push(
        a.status === "fulfilled" &&
          d.status === "fulfilled" &&
          b.status === "fulfilled" &&
          d.value.containers === 1 &&
          a.value.containerId !== b.value.containerId &&
          left.length === 1 &&
          nets.length === 1 &&
          left[0]!.Id === b.value.containerId,
      );
      await m.destroy(run).catch(() => {});
      await removeHostObjects(docker!, hostId);
    }
    return outcomes;
  }

  it("the per-run lock serializes create and delete of one sandbox", { timeout: 120_000 }, async () => {
    expect(await interleave({ pool: "10.253.250.0/24" }, 5)).toEqual([true, true, true, true, true]);
  });

  it("without the lock the same interleaving goes wrong (the test above can fail)", { timeout: 120_000 }, async () => {
    const outcomes = await interleave({ pool: "10.253.250.0/24", lock: noKeyedLock }, 2);
    expect(outcomes).toEqual([false, false]);
  });

  it("removeOrphans at host start removes runs not live here and keeps live ones", { timeout: 60_000 }, async () => {
    const pool = "10.253.251.0/24";
    const { hostId, m: before } = manager("orphans", { pool });
    const live = await before.ensure("live");
    await before.ensure("dead-1");
    await before.ensure("dead-2");
    // A stopped container and a bare network of a dead run are orphans too.
    await docker!.getContainer((await before.ensure("dead-3")).containerId).stop({ t: 0 });
    const other = manager("orphans-other", { pool });
    const foreign = await other.m.ensure("dead-1");

    // The host "restarts": a fresh manager with the same host id and no memory.
    const after = createSandboxManager({ docker: docker!, hostId, image: TEST_IMAGE, pool });
    const res = await after.removeOrphans(new Set(["live"]));
    expect(res.runs.sort()).toEqual(["dead-1", "dead-2", "dead-3"]);
    expect(res).toMatchObject({ containers: 3, networks: 3 });
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 1, networks: 1 });
    expect((await docker!.getContainer(live.containerId).inspect()).State.Running).toBe(true);
    // Another host's sandbox is not ours to remove, even for the same run id.
    expect((await docker!.getContainer(foreign.containerId).inspect()).State.Running).toBe(true);
    // The live run's sandbox is adopted, not duplicated.
    expect((await after.ensure("live")).containerId).toBe(live.containerId);
    expect(await after.removeOrphans(new Set(["live"]))).toMatchObject({ containers: 0, networks: 0, runs: [] });
  });
});

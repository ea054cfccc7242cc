/**
 * The gateway's key → tenant cache (workers/middleware/auth/tenant-cache.ts): a burst shares one
 * lookup, and a revoked key stops working TTL_MS after the lookup that found it started.
 */
import { beforeEach, describe, expect, it } from "vitest";
import {
  cachedTenant,
  clearTenantCache,
  JOIN_WAIT_MS,
  resolveTenant,
  TTL_MS,
} from "../../workers/middleware/auth/tenant-cache";

function deferred<T>() {
  let resolve: (v: T) => void = () => {};
  let reject: (e: unknown) => void = () => {};
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

beforeEach(() => clearTenantCache());

describe("key → tenant cache", () => {
  it("a burst of 100 requests with an uncached key makes one lookup", async () => {
    let lookups = 0;
    const answer = deferred<string | null>();
    const lookup = () => {
      lookups++;
      return answer.promise;
    };
    const all = Promise.all(Array.from({ length: 100 }, () => resolveTenant("k1", lookup)));
    answer.resolve("tenant-a");
    expect(await all).toEqual(Array(100).fill("tenant-a"));
    expect(lookups).toBe(1);
    // …and the next request is a cache hit.
    expect(await resolveTenant("k1", lookup)).toBe("tenant-a");
    expect(lookups).toBe(1);
  });

  it("an entry expires TTL_MS after its lookup started, however long the lookup took", async () => {
    let clock = 1_000_000;
    const now = () => clock;
    const answer = deferred<string | null>();
    const pending = resolveTenant("k2", () => answer.promise, { now });
    clock += 3_000; // a slow lookup: the key may have been revoked while it ran
    answer.resolve("tenant-b");
    expect(await pending).toBe("tenant-b");
    expect(cachedTenant("k2", 1_000_000 + TTL_MS - 1)).toBe("tenant-b");
    expect(cachedTenant("k2", 1_000_000 + TTL_MS)).toBeNull();
  });

  it("a revoked key is refused once the entry expired: the next request asks again", async () => {
    let clock = 5_000_000;
    const now = () => clock;
    let revoked = false;
    let lookups = 0;
    const lookup = async () => {
      lookups++;
      return revoked ? null : "tenant-c";
    };
    expect(await resolveTenant("k3", lookup, { now })).toBe("tenant-c");
    revoked = true;
    clock += TTL_MS - 1;
    expect(await resolveTenant("k3", lookup, { now })).toBe("tenant-c"); // within the documented bound
    clock += 1;
    expect(await resolveTenant("k3", lookup, { now })).toBeNull();
    expect(lookups).toBe(2);
  });

  it("unknown keys are never cached", async () => {
    let lookups = 0;
    const lookup = async () => {
      lookups++;
      return null;
    };
    expect(await resolveTenant("k4", lookup)).toBeNull();
    expect(await resolveTenant("k4", lookup)).toBeNull();
    expect(lookups).toBe(2);
  });

  it("a failed lookup fails the requests that joined it, and the next request asks again", async () => {
    const answer = deferred<string | null>();
    const first = resolveTenant("k5", () => answer.promise);
    const joined = resolveTenant("k5", () => Promise.resolve("never asked"));
    answer.reject(new Error("postgres down"));
    await expect(first).rejects.toThrow("postgres down");
    await expect(joined).rejects.toThrow("postgres down");
    expect(await resolveTenant("k5", async () => "tenant-e")).toBe("tenant-e");
  });

  it("a request stops waiting for a lookup that never ends and asks on its own", async () => {
    const stuck = new Promise<string | null>(() => {}); // e.g. its request was cancelled mid-fetch
    void resolveTenant("k6", () => stuck);
    const t0 = performance.now();
    expect(await resolveTenant("k6", async () => "tenant-f", { joinWaitMs: 50 })).toBe("tenant-f");
    expect(performance.now() - t0).toBeGreaterThanOrEqual(45);
    expect(JOIN_WAIT_MS).toBeLessThan(TTL_MS);
  });

  it("with the database slower than the join wait, a burst makes one lookup per wait, not one per request", async () => {
    const answers: Array<ReturnType<typeof deferred<string | null>>> = [];
    const lookup = () => {
      const d = deferred<string | null>();
      answers.push(d);
      return d.promise;
    };
    const burst = (n: number) => Array.from({ length: n }, () => resolveTenant("k7", lookup, { joinWaitMs: 40 }));
    const first = burst(100);
    await new Promise((r) => setTimeout(r, 60)); // every joiner's wait ended: one of them asked again
    const second = burst(100); // later arrivals join the newer lookup
    await new Promise((r) => setTimeout(r, 10));
    expect(answers).toHaveLength(2);
    answers[1]?.resolve("tenant-g");
    expect(await Promise.all(second)).toEqual(Array(100).fill("tenant-g"));
    // The 99 who left the first lookup joined the second; its starter still waits for its own.
    answers[0]?.resolve("tenant-g");
    expect(await Promise.all(first)).toEqual(Array(100).fill("tenant-g"));
    expect(answers).toHaveLength(2);
  });
});

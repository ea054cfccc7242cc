import { describe, expect, it } from "vitest";
import { carve, formatCidr, overlaps, parseCidr, randomFree } from "../../sandbox-host/sandbox/subnet";

const pool = parseCidr("10.253.240.0/20")!;
const candidates = carve(pool, 28);

describe("sandbox subnet choice", () => {
  it("never picks a subnet that overlaps a taken one, and says when none is left", () => {
    // Everything taken except two /28s, one of them hidden under a larger taken /27.
    const free = [candidates[7]!, candidates[200]!];
    const taken = candidates.filter((c) => !free.includes(c));
    const picks = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const pick = randomFree(candidates, taken);
      expect(pick).not.toBeNull();
      expect(taken.some((t) => overlaps(t, pick!))).toBe(false);
      picks.add(formatCidr(pick!));
    }
    expect([...picks].sort()).toEqual(free.map(formatCidr).sort());
    expect(randomFree(candidates, [pool])).toBeNull();
  });

  it("spreads concurrent pickers over the pool instead of all taking the lowest free subnet", () => {
    const taken = candidates.slice(0, 10);
    const picks = new Set(Array.from({ length: 50 }, () => formatCidr(randomFree(candidates, taken)!)));
    // 50 picks among 246 free subnets: all landing on one (the old "lowest free") is what failed.
    expect(picks.size).toBeGreaterThan(25);
  });
});

import { describe, expect, it } from "vitest";
import { knownJobOwner, OWNER_TTL_MS, rememberJobOwner } from "../../workers/commands/job-owners";

describe("job owners (the stream open's tenant check without Postgres)", () => {
  it("answers for the tenant that created the job, and only within the TTL", () => {
    const t0 = 1_000_000;
    rememberJobOwner("job-a", "tenant-1", t0);
    expect(knownJobOwner("job-a", "tenant-1", t0 + 1)).toBe(true);
    expect(knownJobOwner("job-a", "tenant-2", t0 + 1)).toBe(false);
    expect(knownJobOwner("job-b", "tenant-1", t0 + 1)).toBe(false);
    expect(knownJobOwner("job-a", "tenant-1", t0 + OWNER_TTL_MS - 1)).toBe(true);
    expect(knownJobOwner("job-a", "tenant-1", t0 + OWNER_TTL_MS)).toBe(false);
  });

  it("stays shorter than the shortest retention a deployment may set (60 s)", () => {
    expect(OWNER_TTL_MS).toBeLessThan(60_000);
  });
});

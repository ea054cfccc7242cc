import { describe, expect, it } from "vitest";
import { generateApiKey, hashApiKey, looksLikeApiKey } from "../../src/domain/api-keys";

describe("API keys", () => {
  it("are unique, well-formed and carry their prefix", () => {
    const a = generateApiKey();
    const b = generateApiKey();
    expect(a.key).not.toBe(b.key);
    expect(looksLikeApiKey(a.key)).toBe(true);
    expect(a.key.startsWith(`ear_${a.prefix}_`)).toBe(true);
    expect(looksLikeApiKey("Bearer nonsense")).toBe(false);
  });

  it("hash deterministically to SHA-256 hex, different keys differently", async () => {
    const { key } = generateApiKey();
    expect(await hashApiKey(key)).toBe(await hashApiKey(key));
    expect(await hashApiKey(key)).toMatch(/^[0-9a-f]{64}$/);
    expect(await hashApiKey(key)).not.toBe(await hashApiKey(`${key}x`));
    // Known vector: sha256("abc").
    expect(await hashApiKey("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  });
});

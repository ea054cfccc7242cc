/** IPv4 CIDR arithmetic for carving per-sandbox subnets out of the pool. Pure. */
export interface Cidr {
  /** First address as an unsigned 32-bit integer. */
  base: number;
  prefix: number;
}

export function parseCidr(text: string): Cidr | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(text.trim());
  if (!m) return null;
  const octets = m.slice(1, 5).map(Number);
  const prefix = Number(m[5]);
  if (octets.some((o) => o > 255) || prefix > 32) return null;
  const addr = ((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) >>> 0;
  return { base: (addr & mask(prefix)) >>> 0, prefix };
}

function mask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

export function formatCidr(c: Cidr): string {
  return `${formatIp(c.base)}/${c.prefix}`;
}

export function formatIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}

export function lastAddress(c: Cidr): number {
  return (c.base + 2 ** (32 - c.prefix) - 1) >>> 0;
}

export function overlaps(a: Cidr, b: Cidr): boolean {
  return a.base <= lastAddress(b) && b.base <= lastAddress(a);
}

/** Every /subnetPrefix inside pool, lowest first. */
export function carve(pool: Cidr, subnetPrefix: number): Cidr[] {
  if (subnetPrefix < pool.prefix || subnetPrefix > 30) {
    throw new Error(`cannot carve /${subnetPrefix} subnets out of a /${pool.prefix} pool`);
  }
  const size = 2 ** (32 - subnetPrefix);
  const count = 2 ** (subnetPrefix - pool.prefix);
  return Array.from({ length: count }, (_, i) => ({ base: (pool.base + i * size) >>> 0, prefix: subnetPrefix }));
}

/** The first candidate that overlaps none of `taken`, or null. */
/**
 * A free candidate chosen at random. Several hosts share one Docker engine: when each took the
 * lowest free subnet they all picked the same one at once, one won and the rest rescanned into
 * the same collision (19 of 100 tool runs failed "every pick conflicted" at 100 concurrent).
 */
export function randomFree(candidates: Cidr[], taken: Cidr[], random: () => number = Math.random): Cidr | null {
  const free = candidates.filter((c) => !taken.some((t) => overlaps(c, t)));
  if (free.length === 0) return null;
  return free[Math.min(free.length - 1, Math.floor(random() * free.length))] as Cidr;
}

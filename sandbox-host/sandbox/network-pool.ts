/**
 * One network per sandbox, carved from a dedicated pool. Docker's own network list is the
 * allocation fact: scan it, take a random /N that no network overlaps, create; if the engine
 * says the subnet is taken (another process won the race) rescan and try again. `pending` only
 * keeps this process's concurrent creates from all picking the same subnet between scan and
 * create — it is forgotten as soon as the create returns, so it is not a second lease table.
 */
import type Docker from "dockerode";
import { dockerStatus, errorText } from "./docker";
import { SandboxError, SandboxPoolExhausted } from "./sandbox-errors";
import { type Cidr, carve, formatCidr, formatIp, parseCidr, randomFree } from "./subnet";

export interface NetworkPool {
  create(args: { runId: string; name: string; labels: Record<string, string>; internal: boolean }): Promise<{
    id: string;
    subnet: string;
    attempts: number;
  }>;
}

export function createNetworkPool(opts: {
  docker: Docker;
  pool: string;
  subnetPrefix: number;
  /** Rescans after a subnet conflict before giving up. */
  maxAttempts?: number;
}): NetworkPool {
  const pool = parseCidr(opts.pool);
  if (!pool) throw new SandboxError("invalid_config", `sandbox pool "${opts.pool}" is not an IPv4 CIDR`);
  const candidates = carve(pool, opts.subnetPrefix);
  const pending: Cidr[] = [];
  const maxAttempts = opts.maxAttempts ?? 8;

  async function taken(): Promise<Cidr[]> {
    const nets = await opts.docker.listNetworks();
    const out: Cidr[] = [];
    for (const n of nets) {
      for (const c of n.IPAM?.Config ?? []) {
        const cidr = c.Subnet ? parseCidr(c.Subnet) : null;
        if (cidr) out.push(cidr);
      }
    }
    return out;
  }

  return {
    async create({ runId, name, labels, internal }) {
      for (let attempt = 1; attempt <= maxAttempts; attempt++) {
        let existing: Cidr[];
        try {
          existing = await taken();
        } catch (err) {
          throw new SandboxError("create_failed", `listing Docker networks failed: ${errorText(err)}`, {
            cause: err,
            runId,
          });
        }
        const subnet = randomFree(candidates, [...existing, ...pending]);
        if (!subnet) throw new SandboxPoolExhausted(opts.pool, opts.subnetPrefix, runId);
        pending.push(subnet);
        try {
          const net = await opts.docker.createNetwork({
            Name: name,
            Driver: "bridge",
            CheckDuplicate: true,
            Internal: internal,
            Attachable: false,
            IPAM: {
              Driver: "default",
              Config: [{ Subnet: formatCidr(subnet), Gateway: formatIp(subnet.base + 1) }],
            },
            // An internal network on Docker < 25 still gives the container a default route via
            // the gateway; without a host address on the bridge that next hop does not exist, and
            // the sandbox cannot reach the host's own services either.
            Options: internal ? { "com.docker.network.bridge.inhibit_ipv4": "true" } : {},
            Labels: labels,
          });
          return { id: net.id, subnet: formatCidr(subnet), attempts: attempt };
        } catch (err) {
          if (isSubnetConflict(err)) continue;
          throw new SandboxError("create_failed", `creating network ${name} failed: ${errorText(err)}`, {
            cause: err,
            runId,
          });
        } finally {
          pending.splice(pending.indexOf(subnet), 1);
        }
      }
      throw new SandboxError(
        "create_failed",
        `no free subnet in ${opts.pool} after ${maxAttempts} attempts: every pick conflicted with a network created meanwhile`,
        { runId },
      );
    },
  };
}

/** Docker 20.10 answers 403 "Pool overlaps with other one on this address space". */
export function isSubnetConflict(err: unknown): boolean {
  const s = dockerStatus(err);
  return (s === 403 || s === 409 || s === 500) && /overlap|address space|in use/i.test(errorText(err));
}

/**
 * Where the load goes: `.dev/stack.json` written by `npm run dev` (re-read before each step so a
 * host added with `npm run host` is sampled too), explicit flags, or a stack this process starts
 * itself (`--self-start`) and stops at the end.
 */
import { createWriteStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { type Stack, startStack } from "../stack/start";
import type { HostRef, ModelScript, Target } from "./types";

export interface TargetOptions {
  root: string;
  stackFile?: string;
  gatewayUrl?: string;
  apiKey?: string;
  databaseUrl?: string;
  redisUrl?: string;
  metricsUrls?: string[];
  selfStart?: { hosts: number; maxRuns: number; mockMaxConcurrency?: number } | null;
}

export interface ResolvedTarget {
  target: Target;
  /** Re-reads the host list (stack file) before a step. */
  refresh(): Promise<void>;
  /** Stops what the load generator started (a self-started stack); a no-op otherwise. */
  close(): Promise<void>;
  /** Host capacity when known (self-start). */
  hostCapacity: number | null;
  stack: Stack | null;
  /**
   * Where the stack's processes are (for their CPU, proc-cpu.ts): the process whose descendants
   * they are (this one for a self-started stack, `pid` of `.dev/stack.json`), and hosts by pid.
   */
  procs(): { root: number | null; rootPart: string | null; hosts: Map<number, string> };
}

interface StackFile {
  gateway_url?: string;
  api_key?: string;
  database_url?: string;
  redis_url?: string | null;
  hosts?: Array<{ id: string; metrics_url: string; pid?: number }>;
  pid?: number;
}

export async function resolveTarget(o: TargetOptions, script: ModelScript, logDir: string): Promise<ResolvedTarget> {
  if (o.selfStart) {
    const logStream = createWriteStream(join(logDir, "stack.log"), { flags: "a" });
    const stack = await startStack({
      root: o.root,
      hosts: o.selfStart.hosts,
      // One tenant drives every run here: the per-tenant quota (a fairness rule between tenants,
      // default 32) and the newcomer reserve (slots kept for another tenant, 1 in 8 by default)
      // would cap the very concurrency the load generator measures, so both are off on this stack.
      hostEnv: { HOST_MAX_RUNS: String(o.selfStart.maxRuns), QUOTA_TENANT_LIMIT: "0", HOST_RESERVED_SLOTS: "0" },
      // The same tenant's request rate (1,200 per 10 s), open streams (200) and queued jobs (1,000)
      // would refuse most of a 300- or 1,000-VU step (each VU is a submit, a stream and reads).
      // Raised, not turned off (0 would skip the checks): every request still pays for them.
      gatewayVars: {
        RATE_LIMIT_REQUESTS: "1000000",
        MAX_STREAMS_PER_TENANT: "100000",
        MAX_QUEUED_JOBS_PER_TENANT: "100000",
      },
      mockModel: {
        ttftMs: script.ttftMs,
        tokensPerS: script.tokensPerS,
        maxConcurrency: o.selfStart.mockMaxConcurrency,
      },
      log: (source, line) => logStream.write(`[${source}] ${line}\n`),
    });
    const hosts = () => stack.hosts.map((h) => ({ id: h.id, metricsUrl: h.metricsUrl }));
    return {
      target: {
        gatewayUrl: stack.gatewayUrl,
        apiKey: stack.apiKey,
        databaseUrl: stack.databaseUrl,
        redisUrl: stack.redisUrl,
        hosts,
        source: `self-started stack (${o.selfStart.hosts} hosts × HOST_MAX_RUNS=${o.selfStart.maxRuns})`,
      },
      refresh: async () => {},
      close: async () => {
        await stack.stop();
        await new Promise<void>((r) => logStream.end(r));
      },
      hostCapacity: o.selfStart.maxRuns,
      stack,
      procs: () => ({
        root: process.pid,
        rootPart: "load parent",
        hosts: new Map(stack.hosts.flatMap((h) => (h.process.pid ? [[h.process.pid, `host ${h.id}`] as const] : []))),
      }),
    };
  }

  const file = o.stackFile ?? join(o.root, ".dev", "stack.json");
  let doc: StackFile = {};
  if (!o.gatewayUrl || !o.apiKey) {
    try {
      doc = JSON.parse(await readFile(file, "utf8")) as StackFile;
    } catch {
      throw new Error(
        `no target: ${file} not found. Start the stack with \`npm run dev\`, pass --gateway and --api-key, or use --self-start.`,
      );
    }
  }
  const gatewayUrl = o.gatewayUrl ?? doc.gateway_url;
  const apiKey = o.apiKey ?? doc.api_key;
  if (!gatewayUrl || !apiKey) throw new Error(`${file} lacks gateway_url/api_key`);
  const fromFlags = (o.metricsUrls ?? []).map((u, i) => ({ id: `host-${i + 1}`, metricsUrl: u }));
  let stackPid = o.gatewayUrl ? null : (doc.pid ?? null);
  let hostPids = new Map<number, string>();
  const readPids = (d: StackFile) => {
    hostPids = new Map((d.hosts ?? []).flatMap((h) => (h.pid ? [[h.pid, `host ${h.id}`] as const] : [])));
  };
  if (!o.gatewayUrl) readPids(doc);
  let hosts: HostRef[] = fromFlags.length
    ? fromFlags
    : (doc.hosts ?? []).map((h) => ({ id: h.id, metricsUrl: h.metrics_url }));
  return {
    target: {
      gatewayUrl: gatewayUrl.replace(/\/$/, ""),
      apiKey,
      databaseUrl: o.databaseUrl ?? doc.database_url ?? null,
      redisUrl: o.redisUrl ?? doc.redis_url ?? null,
      hosts: () => hosts,
      source: o.gatewayUrl ? "flags" : file,
    },
    refresh: async () => {
      if (fromFlags.length || o.gatewayUrl) return;
      try {
        const fresh = JSON.parse(await readFile(file, "utf8")) as StackFile;
        hosts = (fresh.hosts ?? []).map((h) => ({ id: h.id, metricsUrl: h.metrics_url }));
        stackPid = fresh.pid ?? null;
        readPids(fresh);
      } catch {}
    },
    close: async () => {},
    hostCapacity: null,
    stack: null,
    procs: () => ({ root: stackPid, rootPart: stackPid ? "dev stack process" : null, hosts: hostPids }),
  };
}

/**
 * `npm run bench:workspace`: what workspace snapshots and their restores cost (docs/sandboxes.md
 * "Workspace snapshots", docs/capacity.md "Workspace snapshots and artifacts").
 *
 *  1. In the sandbox, for workspaces of 1, 10 and 100 MB with a small change (one 1 KiB file
 *     rewritten) before each snapshot: a full snapshot (tar | gzip in the sandbox, read over the
 *     exec, and the hash) against a diff (one exec: the tree listing and the entries changed since
 *     the last snapshot's listing, packed; then the hash), their bytes, and the restore of a full archive against
 *     that of a chain (the full, then MAX_CHAIN_DIFFS diffs) into a fresh sandbox. The workspace
 *     is random bytes (incompressible: the worst case for size and gzip time), in files of 1 MiB.
 *     The upload and download (one signed request each, one R2 write or read) are not in these.
 *  2. End to end (`--recoveries N`, 0 to skip), on a stack with two hosts behind a counting proxy:
 *     N runs of 3 shell steps on a 1 MiB workspace whose owner is SIGKILLed during the second
 *     model turn; the time from the kill to the recovered execution's first `tool.result` event,
 *     against the same runs killed in their first turn, before any sandbox (nothing to restore:
 *     the recovery as it was before snapshots, less the reset note), the two interleaved. The
 *     gateway's blob routes the hosts called during each run (`PUT`: one R2 put, class A; `GET`:
 *     one R2 get, class B), counted by the proxy, priced at R2's list prices.
 * Usage: `npm run bench:workspace [sizes MB, e.g. 1,10,100] [--rounds N] [--recoveries N] [--json]`
 */
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import type { WorkspaceLink } from "../../sandbox-host/runner/journal";
import { MAX_CHAIN_DIFFS, takeSnapshot, unpackLink } from "../../sandbox-host/runner/workspace";
import type { Tree } from "../../sandbox-host/runner/workspace-diff";
import { connectDocker } from "../../sandbox-host/sandbox/docker";
import { createSandboxManager } from "../../sandbox-host/sandbox/manager";
import { WORKSPACE } from "../../sandbox-host/sandbox/profile";
import { isTerminalEventType } from "../../src/contracts/events";
import { toHex } from "../../src/domain/hex";
import { ensureSandboxImage, LOCAL_SANDBOX_IMAGE } from "../build/sandbox-image";
import { countingHttpProxy } from "../lib/http-counting-proxy";
import { PRICES } from "../lib/prices";
import { readSse } from "../lib/sse";
import { type HostHandle, startStack } from "../stack/start";
import { dist, pct, startBench, summary } from "./harness";

const bench = startBench({
  usage: "npm run bench:workspace [sizes in MB, e.g. 1,10,100] [--rounds N] [--recoveries N] [--json]",
  positionals: true,
  options: { rounds: { type: "string", default: "5" }, recoveries: { type: "string", default: "10" } },
});
const recoveries = Number(bench.args.recoveries);
// "none": only part 2.
const sizes = bench.positionals[0] === "none" ? [] : (bench.positionals[0] ?? "1,10,100").split(",").map(Number);
const rounds = Number(bench.args.rounds);
const SNAPSHOT_MAX = 32 * 1024 * 1024;
// The tmpfs is 256 MiB; the archive is read into memory: bound it above the largest workspace.
const PACK_CAP = 160 * 1024 * 1024;

const docker = connectDocker();
await ensureSandboxImage({ docker, image: LOCAL_SANDBOX_IMAGE });
const m = createSandboxManager({
  docker,
  hostId: `bench-ws-${process.pid}`,
  image: LOCAL_SANDBOX_IMAGE,
  pool: "10.253.252.0/24",
});
const figures: Record<string, unknown> = {};
const rows: Array<Array<string | number>> = [
  ["workspace", "archive bytes p50", "snapshot ms p50 / p95", "of it: hash ms p50", "restore ms p50 / p95", "stored?"],
];
const diffRows: Array<Array<string | number>> = [
  [
    "workspace",
    "full: bytes / ms p50",
    "diff: bytes p50 / ms p50 / p95",
    `restore: full ms p50 / chain of 1 + ${MAX_CHAIN_DIFFS} ms p50 / p95`,
  ],
];

try {
  for (const mb of sizes) {
    const src = `src-${mb}`;
    await m.exec(src, {
      cmd: `i=0; while [ $i -lt ${mb} ]; do head -c 1048576 /dev/urandom > f$i.bin; i=$((i+1)); done`,
      timeoutMs: 300_000,
    });
    const snap: number[] = [];
    const hash: number[] = [];
    const restore: number[] = [];
    const bytes: number[] = [];
    for (let r = 0; r < rounds; r++) {
      await m.exec(src, { cmd: `head -c 1024 /dev/urandom > small.bin` });
      const t0 = performance.now();
      const packed = await m.packDir(src, WORKSPACE, PACK_CAP, { gzip: true, timeoutMs: 300_000 });
      if (!packed.archive) throw new Error(`no archive for ${mb} MB`);
      const archive = new Uint8Array(packed.archive);
      const t1 = performance.now();
      toHex(await crypto.subtle.digest("SHA-256", archive));
      const t2 = performance.now();
      snap.push(t2 - t0);
      hash.push(t2 - t1);
      bytes.push(archive.byteLength);
      const dst = `dst-${mb}-${r}`;
      await m.ensure(dst);
      const t3 = performance.now();
      await m.unpackDir(dst, WORKSPACE, archive, { timeoutMs: 300_000 });
      restore.push(performance.now() - t3);
      await m.destroy(dst);
    }
    // Diffs: a chain's full snapshot, then each round a 1 KiB rewrite and the step's snapshot as
    // snapshotWorkspace takes it (one exec: the listing and what changed since it, packed), hashed.
    const first = await takeSnapshot(m, src, { tree: null, chain: [] }, { maxBytes: PACK_CAP });
    if (first.kind !== "full") throw new Error(`no full snapshot for ${mb} MB: ${first.kind}`);
    const full = first.blob;
    let base: Tree | null = first.tree;
    const links: WorkspaceLink[] = [
      { sha256: toHex(await crypto.subtle.digest("SHA-256", full)), bytes: full.byteLength },
    ];
    const chain: Uint8Array[] = [];
    const diffMs: number[] = [];
    const diffBytes: number[] = [];
    for (let d = 0; d < MAX_CHAIN_DIFFS; d++) {
      await m.exec(src, { cmd: `head -c 1024 /dev/urandom > small.bin` });
      const t0 = performance.now();
      const took = await takeSnapshot(m, src, { tree: base, chain: links }, { maxBytes: PACK_CAP });
      if (took.kind !== "diff" || took.execs !== 1) throw new Error(`no one-exec diff for ${mb} MB: ${took.kind}`);
      const sha256 = toHex(await crypto.subtle.digest("SHA-256", took.blob));
      diffMs.push(performance.now() - t0);
      diffBytes.push(took.blob.byteLength);
      chain.push(took.blob);
      links.push({ sha256, bytes: took.blob.byteLength });
      base = took.tree;
    }
    const chainMs: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const dst = `chain-${mb}-${r}`;
      await m.ensure(dst);
      const t0 = performance.now();
      await unpackLink(m, dst, full, true);
      for (const blob of chain) await unpackLink(m, dst, blob, false);
      chainMs.push(performance.now() - t0);
      // The chain restored the tree the source has: same listing of names and sizes.
      const got = await m.exec(dst, { cmd: "find . -type f -exec md5sum {} + | sort" });
      const want = await m.exec(src, { cmd: "find . -type f -exec md5sum {} + | sort" });
      if (got.stdout !== want.stdout) throw new Error(`the chain did not restore the ${mb} MB workspace`);
      await m.destroy(dst);
    }
    figures[`${mb}MB_diff`] = {
      diff_ms: diffMs,
      diff_bytes: diffBytes,
      chain_restore_ms: chainMs,
      full_bytes: full.byteLength,
    };
    diffRows.push([
      `${mb} MB`,
      `${full.byteLength} / ${Math.round(pct(snap, 50))}`,
      `${Math.round(pct(diffBytes, 50))} / ${Math.round(pct(diffMs, 50))} / ${Math.round(pct(diffMs, 95))}`,
      `${Math.round(pct(restore, 50))} / ${Math.round(pct(chainMs, 50))} / ${Math.round(pct(chainMs, 95))}`,
    ]);
    await m.destroy(src);
    const stored = pct(bytes, 50) <= SNAPSHOT_MAX;
    figures[`${mb}MB`] = { snapshot_ms: snap, hash_ms: hash, restore_ms: restore, archive_bytes: bytes, stored };
    rows.push([
      `${mb} MB`,
      Math.round(pct(bytes, 50)),
      `${Math.round(pct(snap, 50))} / ${Math.round(pct(snap, 95))}`,
      Math.round(pct(hash, 50)),
      `${Math.round(pct(restore, 50))} / ${Math.round(pct(restore, 95))}`,
      stored ? "yes" : "no: over SANDBOX_WORKSPACE_MAX_BYTES (32 MiB)",
    ]);
  }
} finally {
  for (const s of m.active()) await m.destroy(s.runId).catch(() => {});
}
bench.table(rows);
bench.table(diffRows);
bench.say(`rounds ${rounds} per size; ${bench.load()}`);
if (recoveries > 0) figures.recovery = await recoveryWithRestore(recoveries);
bench.done(figures);

/** Part 2 (see the header): recovery with a restore against one without, and the R2 operations. */
async function recoveryWithRestore(n: number) {
  const FAST_LOSS = { HOST_HEARTBEAT_MS: "1000", HOST_RUN_LOST_AFTER_MS: "4000", HOST_REAP_MS: "200" };
  const stack = await startStack({ hosts: 0, mockModel: { ttftMs: 5, tokensPerS: 2000 } });
  const gw = await countingHttpProxy(stack.gatewayUrl);
  const pool = new pg.Pool({ connectionString: stack.databaseUrl, max: 2 });
  const headers = { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" };
  const blobOps = () => {
    let put = 0;
    let get = 0;
    for (const [route, count] of gw.counts.byRoute) {
      if (route.startsWith("PUT /internal/blobs/")) put += count;
      else if (route.startsWith("GET /internal/blobs/")) get += count;
    }
    return { put, get };
  };
  // Three shell steps: the first writes 1 MiB (the full snapshot), each a small change (a diff);
  // each turn waits 1.5 s for its first token, so the second turn is still thinking at the kill.
  const script = {
    reply: "done",
    ttft_ms: 1500,
    tool_calls: [
      {
        name: "shell",
        args: { command: "[ -f w.bin ] || head -c 1048576 /dev/urandom > w.bin; date +%s%N >> log.txt" },
      },
    ],
    tool_turns: 3,
  };
  const out: Record<string, unknown> = {};
  const table: Array<Array<string | number>> = [
    ["recovery", "kill → first tool.result ms p50 / p95 / max", "sandbox_reset", "R2 PUT (A) / GET (B) per run p50"],
  ];
  try {
    const env = { ...FAST_LOSS, GATEWAY_URL: gw.url };
    const live: HostHandle[] = [await stack.addHost(env), await stack.addHost(env)];
    const variants = ["restore", "nothing to restore"] as const;
    const ms = new Map<string, number[]>(variants.map((v) => [v, []]));
    const ops = new Map<string, Array<{ put: number; get: number }>>(variants.map((v) => [v, []]));
    const resets = new Map<string, Set<string>>(variants.map((v) => [v, new Set()]));
    // The two interleaved, so the machine's load falls on both alike.
    for (let i = 0; i < 2 * n; i++) {
      const variant = variants[i % 2] as (typeof variants)[number];
      const before = blobOps();
      const r = await fetch(`${gw.url}/v1/jobs`, {
        method: "POST",
        headers,
        body: JSON.stringify({
          input: { messages: [{ role: "user", content: `!mock ${JSON.stringify(script)}` }] },
          tools: ["shell"],
        }),
      });
      const id = ((await r.json()) as { job: { id: string } }).job.id;
      // "restore": killed in the second turn, once the first step's snapshot is journaled.
      // "nothing to restore": killed in the first turn, before any sandbox (today's recovery
      // without a workspace; a run killed after a step whose workspace was not snapshotted would
      // also get the reset note, which the mock model reads as a prompt without a script).
      const ready =
        variant === "restore"
          ? "SELECT 1 FROM job_journal WHERE job_id = $1 AND kind = 'snapshot'"
          : "SELECT 1 FROM jobs WHERE id = $1 AND state = 'running' AND owner IS NOT NULL";
      for (let t = 0; t < 600; t++) {
        if ((await pool.query(ready, [id])).rowCount) break;
        await sleep(25);
      }
      const { rows } = await pool.query<{ owner: string }>("SELECT owner FROM jobs WHERE id = $1", [id]);
      const owner = live.find((h) => h.id === rows[0]?.owner);
      if (!owner) throw new Error(`the owner of ${id} is not a live host`);
      const t0 = Date.now();
      owner.process.kill("SIGKILL");
      live.splice(live.indexOf(owner), 1);
      const spare = stack.addHost(env).then((h) => live.push(h));
      let recovered = false;
      let firstResult = Number.NaN;
      let terminal = "";
      for await (const ev of readSse(`${gw.url}/v1/jobs/${id}/events`, {
        headers,
        signal: AbortSignal.timeout(120_000),
      })) {
        const e = JSON.parse(ev.data) as { type: string; ts: string; payload?: { sandbox_reset?: boolean } };
        if (e.type === "run.recovered") {
          recovered = true;
          resets.get(variant)?.add(String(e.payload?.sandbox_reset));
        } else if (recovered && e.type === "tool.result" && Number.isNaN(firstResult)) firstResult = Date.parse(e.ts);
        if (isTerminalEventType(e.type)) {
          terminal = e.type;
          break;
        }
      }
      if (terminal !== "run.completed" || Number.isNaN(firstResult)) throw new Error(`run ${id}: ${terminal}`);
      ms.get(variant)?.push(firstResult - t0);
      await spare;
      await sleep(500); // the run's last uploads belong to it
      const after = blobOps();
      ops.get(variant)?.push({ put: after.put - before.put, get: after.get - before.get });
    }
    for (const variant of variants) {
      const xs = ms.get(variant) ?? [];
      const puts = (ops.get(variant) ?? []).map((o) => o.put);
      const gets = (ops.get(variant) ?? []).map((o) => o.get);
      out[variant] = { kill_to_first_tool_result_ms: dist(xs), r2_put: puts, r2_get: gets };
      bench.say(`${variant}: kill → first tool.result ${summary(xs)}`);
      table.push([
        variant,
        `${Math.round(pct(xs, 50))} / ${Math.round(pct(xs, 95))} / ${Math.round(pct(xs, 100))}`,
        [...(resets.get(variant) ?? [])].join(","),
        `${pct(puts, 50)} / ${pct(gets, 50)}`,
      ]);
    }
    bench.table(table);
    const restore = out.restore as { r2_put: number[]; r2_get: number[] };
    const a = pct(restore.r2_put, 50);
    const b = pct(restore.r2_get, 50);
    const perMillion = a * PRICES.r2ClassAPerMillion + b * PRICES.r2ClassBPerMillion;
    bench.say(
      `R2 per recovered run (3 steps, 1 recovery): ${a} class A + ${b} class B = $${perMillion.toFixed(2)} per million runs (${PRICES.r2Source})`,
    );
    bench.say(`${bench.load()} at the end`);
    return out;
  } finally {
    await pool.end();
    await gw.close();
    await stack.stop();
  }
}

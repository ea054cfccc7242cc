/**
 * `npm run bench:workspace`: what a workspace snapshot and its restore cost in the sandbox
 * (docs/sandboxes.md "Workspace snapshots"), for workspaces of 1, 10 and 100 MB with a small
 * change (one 1 KiB file rewritten) before each snapshot: the pack (tar | gzip in the sandbox,
 * read over the exec), the hash (WebCrypto), the archive's bytes, and the restore (unpack into a
 * fresh sandbox). The workspace is random bytes (incompressible: the worst case for size and
 * gzip time), in files of 1 MiB. The upload and download (one signed request each, one R2 write
 * or read) are not in these figures. Usage: `npm run bench:workspace [sizes MB, e.g. 1,10,100] [--rounds N] [--json]`
 */
import { connectDocker } from "../../sandbox-host/sandbox/docker";
import { createSandboxManager } from "../../sandbox-host/sandbox/manager";
import { WORKSPACE } from "../../sandbox-host/sandbox/profile";
import { toHex } from "../../src/domain/hex";
import { ensureSandboxImage, LOCAL_SANDBOX_IMAGE } from "../build/sandbox-image";
import { pct, startBench } from "./harness";

const bench = startBench({
  usage: "npm run bench:workspace [sizes in MB, e.g. 1,10,100] [--rounds N] [--json]",
  positionals: true,
  options: { rounds: { type: "string", default: "5" } },
});
const sizes = (bench.positionals[0] ?? "1,10,100").split(",").map(Number);
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
bench.say(`rounds ${rounds} per size; ${bench.load()}`);
bench.done(figures);

/**
 * A workspace chain against a real Docker engine (docs/sandboxes.md "Workspace snapshots"): a full
 * snapshot, then diffs of what each change did, each taken as the runner takes it (`takeSnapshot`:
 * one exec in the sandbox listing the tree and packing what changed), applied in order into a
 * fresh sandbox, give exactly the source's tree: every entry's type, mode, size and bytes, after
 * deletions of files and of a directory with all it held, a file replaced by a directory and a
 * directory by a file, a symlink retargeted, a chmod, names a shell would split or quote, and a
 * rewrite of the same size right after the listing (the same-tick rule).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WorkspaceLink } from "../../sandbox-host/runner/journal";
import { MAX_CHAIN_DIFFS, type SnapshotTake, takeSnapshot, unpackLink } from "../../sandbox-host/runner/workspace";
import type { Tree } from "../../sandbox-host/runner/workspace-diff";
import { createSandboxManager, type SandboxManager } from "../../sandbox-host/sandbox/manager";
import { removeHostObjects, requireDocker, TEST_IMAGE, testHostId } from "../helpers/docker";

const docker = await requireDocker();
// Disjoint from the other sandbox suites' pools: vitest runs files at once.
const POOL = "10.253.236.0/22";
const MAX = 32 * 1024 * 1024;

describe.skipIf(!docker)("workspace chain: full, diffs, restore", () => {
  const hostId = testHostId("ws-chain");
  let m: SandboxManager;
  // Every workspace command the snapshots send the sandbox, by kind.
  const calls = { snapshotTree: 0, packDir: 0, listTree: 0 };
  let counted: SandboxManager;

  beforeAll(() => {
    m = createSandboxManager({ docker: docker!, hostId, image: TEST_IMAGE, pool: POOL });
    counted = {
      ...m,
      snapshotTree: (...a) => {
        calls.snapshotTree++;
        return m.snapshotTree(...a);
      },
      packDir: (...a) => {
        calls.packDir++;
        return m.packDir(...a);
      },
      listTree: (...a) => {
        calls.listTree++;
        return m.listTree(...a);
      },
    };
  });
  afterAll(async () => {
    if (docker) await removeHostObjects(docker, hostId);
  });

  const sh = async (run: string, cmd: string) => {
    const r = await m.exec(run, { cmd });
    expect(r.exitCode, r.stderr).toBe(0);
    return r.stdout;
  };
  // Type, mode, size and link target or MD5 of every entry: what "the same tree" means here.
  const fingerprint = (run: string) =>
    sh(
      run,
      `find . -mindepth 1 | sort | while read -r p; do
         if [ -L "$p" ]; then echo "$p L $(readlink "$p")";
         elif [ -d "$p" ]; then echo "$p D $(stat -c %a "$p")";
         else echo "$p F $(stat -c '%a %s' "$p") $(md5sum < "$p")"; fi; done`,
    );
  /** A run's snapshot state as the runner keeps it: the chain's links and the last listing. */
  const chainOf = (run: string) => {
    const prior: { tree: Tree | null; chain: WorkspaceLink[] } = { tree: null, chain: [] };
    const blobs: Uint8Array[] = [];
    return {
      prior,
      blobs,
      async step(): Promise<SnapshotTake> {
        const took = await takeSnapshot(counted, run, prior, { maxBytes: MAX });
        if (took.kind === "unchanged") prior.tree = took.tree;
        if (took.kind !== "full" && took.kind !== "diff") return took;
        const link = { sha256: `${blobs.length}`, bytes: took.blob.byteLength };
        if (took.kind === "full") blobs.length = 0;
        prior.chain = took.kind === "full" ? [link] : [...prior.chain, link];
        prior.tree = took.tree;
        blobs.push(took.blob);
        return took;
      },
    };
  };

  it("restores exactly the source's tree through deletions, type changes, a chmod and a same-tick rewrite, one exec a step", async () => {
    const src = "chain-src";
    await sh(
      src,
      "mkdir -p keep gone/deep swap-to-file && echo a > a.txt && echo x > gone/x && echo y > gone/deep/y && " +
        "echo f > swap-to-dir && echo s > swap-to-file/s && ln -s a.txt link && head -c 50000 /dev/urandom > big.bin",
    );
    const c = chainOf(src);
    expect((await c.step()).kind).toBe("full");
    const changes = [
      "rm -rf gone && rm swap-to-dir && mkdir swap-to-dir && echo in > swap-to-dir/in",
      "rm -rf swap-to-file && echo now-a-file > swap-to-file && ln -sfn big.bin link",
      "chmod 600 a.txt && mkdir -p keep/new/deeper && echo n > keep/new/deeper/n",
      `echo q > "it's |odd" && echo s > 'two  spaces' && echo d > '$(x)' && echo b > 'back\\slash'`,
    ];
    const sizes: number[] = [];
    for (const change of changes) {
      await sh(src, change);
      const took = await c.step();
      expect(took.kind).toBe("diff");
      if (took.kind === "diff") sizes.push(took.blob.byteLength);
    }
    // Nothing changed: nothing stored, still one exec.
    expect((await c.step()).kind).toBe("unchanged");
    // A rewrite of the same size straight after a listing: its ctime may share the listing's
    // tick, so the listing kept it as unknown or its ctime moved; either way the diff takes it.
    await sh(src, "echo b1 > same.txt");
    expect((await c.step()).kind).toBe("diff");
    await sh(src, "echo b2 > same.txt");
    expect((await c.step()).kind).toBe("diff");
    // Every step above was one command in the sandbox: no separate listing, no second pack.
    // (the full, four changes, the unchanged step and the two rewrites).
    expect(calls).toEqual({ snapshotTree: 8, packDir: 0, listTree: 0 });

    const dst = "chain-dst";
    await m.ensure(dst);
    for (const [i, blob] of c.blobs.entries()) await unpackLink(m, dst, blob, i === 0);
    expect(await fingerprint(dst)).toBe(await fingerprint(src));
    expect(await sh(dst, 'cat same.txt "it\'s |odd"; ls gone 2>&1 || true')).toMatch(/^b2\nq\n.*No such file/s);
    // The diffs hold what changed, not the 50 kB that did not.
    for (const bytes of sizes) expect(bytes).toBeLessThan(2_000);
    expect(c.blobs[0]?.byteLength).toBeGreaterThan(50_000);
  }, 120_000);

  it("cuts a chain at MAX_CHAIN_DIFFS to a full archive in the same one exec, not for a step that changed nothing, and packs whole when /tmp is full", async () => {
    const src = "chain-cut";
    // A full archive that outweighs ten small diffs, so the count of diffs is what cuts the chain.
    await sh(src, "echo 0 > n.txt && head -c 20000 /dev/urandom > r.bin");
    const c = chainOf(src);
    expect((await c.step()).kind).toBe("full");
    for (let i = 1; i <= MAX_CHAIN_DIFFS; i++) {
      await sh(src, `echo ${i} > n.txt`);
      expect((await c.step()).kind).toBe("diff");
    }
    const before = { ...calls };
    expect((await c.step()).kind).toBe("unchanged");
    await sh(src, "echo cut > n.txt");
    const cut = await c.step();
    expect([cut.kind, cut.kind === "full" && cut.execs]).toEqual(["full", 1]);
    expect(c.prior.chain).toHaveLength(1);
    expect(calls).toEqual({ ...before, snapshotTree: before.snapshotTree + 2 });

    // /tmp full (where the listing goes): the step still gets a snapshot, whole, from a second exec.
    await m.exec(src, { cmd: "head -c 100000000 /dev/zero > /tmp/fill" });
    await sh(src, "echo after-full-tmp > n.txt");
    const packedAlone = await c.step();
    expect([packedAlone.kind, packedAlone.kind === "full" && packedAlone.execs]).toEqual(["full", 2]);
    expect(c.prior.tree).toBeNull();
    await sh(src, "rm /tmp/fill && echo cut > n.txt");
    expect((await c.step()).kind).toBe("full");
    const dst = "chain-cut-dst";
    await m.ensure(dst);
    await unpackLink(m, dst, c.blobs[0] as Uint8Array, true);
    expect(await sh(dst, "cat n.txt")).toBe("cut\n");
  }, 120_000);
});

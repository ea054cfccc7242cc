/**
 * A workspace chain against a real Docker engine (docs/sandboxes.md "Workspace snapshots"): a full
 * snapshot, then diffs of what each change did (the tree listing, the diff, the changed entries
 * packed), applied in order into a fresh sandbox, give exactly the source's tree: every entry's
 * type, mode, size and bytes, after deletions of files and of a directory with all it held, a
 * file replaced by a directory and a directory by a file, a symlink retargeted, a chmod, and a
 * rewrite of the same size right after the listing (the same-tick rule).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packTreeDiff, unpackLink } from "../../sandbox-host/runner/workspace";
import { diffTrees, parseTree, type Tree } from "../../sandbox-host/runner/workspace-diff";
import { createSandboxManager, type SandboxManager } from "../../sandbox-host/sandbox/manager";
import { WORKSPACE } from "../../sandbox-host/sandbox/profile";
import { removeHostObjects, requireDocker, TEST_IMAGE, testHostId } from "../helpers/docker";

const docker = await requireDocker();
// Disjoint from the other sandbox suites' pools: vitest runs files at once.
const POOL = "10.253.236.0/22";
const MAX = 32 * 1024 * 1024;

describe.skipIf(!docker)("workspace chain: full, diffs, restore", () => {
  const hostId = testHostId("ws-chain");
  let m: SandboxManager;

  beforeAll(() => {
    m = createSandboxManager({ docker: docker!, hostId, image: TEST_IMAGE, pool: POOL });
  });
  afterAll(async () => {
    if (docker) await removeHostObjects(docker, hostId);
  });

  const sh = async (run: string, cmd: string) => {
    const r = await m.exec(run, { cmd });
    expect(r.exitCode, r.stderr).toBe(0);
    return r.stdout;
  };
  const treeOf = async (run: string): Promise<Tree> => {
    const listed = await m.listTree(run, WORKSPACE, MAX);
    const tree = listed.listing === null ? null : parseTree(listed.listing);
    expect(tree).not.toBeNull();
    return tree as Tree;
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

  it("restores exactly the source's tree through deletions, type changes, a chmod and a same-tick rewrite", async () => {
    const src = "chain-src";
    await sh(
      src,
      "mkdir -p keep gone/deep swap-to-file && echo a > a.txt && echo x > gone/x && echo y > gone/deep/y && " +
        "echo f > swap-to-dir && echo s > swap-to-file/s && ln -s a.txt link && head -c 50000 /dev/urandom > big.bin",
    );
    const full = (await m.packDir(src, WORKSPACE, MAX, { gzip: true })).archive as Buffer;
    let base = await treeOf(src);
    const changes = [
      "rm -rf gone && rm swap-to-dir && mkdir swap-to-dir && echo in > swap-to-dir/in",
      "rm -rf swap-to-file && echo now-a-file > swap-to-file && ln -sfn big.bin link",
      "chmod 600 a.txt && mkdir -p keep/new/deeper && echo n > keep/new/deeper/n",
    ];
    const chain: Uint8Array[] = [];
    const sizes: number[] = [];
    for (const change of changes) {
      await sh(src, change);
      const tree = await treeOf(src);
      const blob = await packTreeDiff(m, src, diffTrees(base, tree), MAX);
      expect(blob).not.toBeNull();
      chain.push(blob as Uint8Array);
      sizes.push((blob as Uint8Array).byteLength);
      base = tree;
    }
    // A rewrite of the same size straight after a listing: its ctime may share the listing's
    // tick, so the listing kept it as unknown or its ctime moved; either way the diff takes it.
    await sh(src, "echo b1 > same.txt");
    base = await treeOf(src);
    await sh(src, "echo b2 > same.txt");
    const last = diffTrees(base, await treeOf(src));
    expect(last.changed).toContain("./same.txt");
    chain.push((await packTreeDiff(m, src, last, MAX)) as Uint8Array);

    const dst = "chain-dst";
    await m.ensure(dst);
    await unpackLink(m, dst, full, true);
    for (const blob of chain) await unpackLink(m, dst, blob, false);
    expect(await fingerprint(dst)).toBe(await fingerprint(src));
    expect(await sh(dst, "cat same.txt; ls gone 2>&1 || true")).toMatch(/^b2\n.*No such file/s);
    // The diffs hold what changed, not the 50 kB that did not.
    for (const bytes of sizes) expect(bytes).toBeLessThan(2_000);
    expect(full.byteLength).toBeGreaterThan(50_000);
  }, 120_000);
});

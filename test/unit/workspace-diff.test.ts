/**
 * The pure half of workspace diffs (sandbox-host/runner/workspace-diff.ts): the tree a sandbox's
 * listing gives, what changed between two, and the diff blob's framing. The end-to-end chain
 * (real Docker, a recovery) is in test/integration/workspace-snapshots.test.ts.
 */
import { describe, expect, it } from "vitest";
import { decodeDiff, diffTrees, encodeDiff, parseTree } from "../../sandbox-host/runner/workspace-diff";

const MARK = "2026-12-05 19:29:30.300000000 +0000";
const T1 = "2026-12-05 19:29:30.100000000 +0000";
const T2 = "2026-12-05 19:29:30.200000000 +0000";
const line = (mode: string, ino: number, size: number, ctime: string, name: string) =>
  `${mode}|${ino}|${size}|${ctime}|${ctime}|${name}`;
const listing = (...lines: string[]) => `${MARK}\n${lines.join("\n")}\n`;

describe("workspace diffs", () => {
  it("counts as changed an entry rewritten to the same size (only its ctime differs)", () => {
    const base = parseTree(listing(line("81a4", 10, 7, T1, "./b.txt")));
    const next = parseTree(listing(line("81a4", 10, 7, T2, "./b.txt")));
    expect(base && next && diffTrees(base, next)).toEqual({ changed: ["./b.txt"], deleted: [] });
    expect(base && diffTrees(base, base)).toEqual({ changed: [], deleted: [] });
  });

  it("keeps an entry stamped at or after the marker unknown, so the next diff takes it whatever its stamp", () => {
    const racy = parseTree(listing(line("81a4", 10, 7, MARK, "./hot.txt")));
    expect(racy?.get("./hot.txt")).toBe(`${0o100000}?`);
    // Same signature as before, but the one before was racy: it is sent again.
    const later = parseTree(`2026-12-05 19:29:31.000000000 +0000\n${line("81a4", 10, 7, MARK, "./hot.txt")}\n`);
    expect(racy && later && diffTrees(racy, later).changed).toEqual(["./hot.txt"]);
  });

  it("lists a deleted directory once for all it held, and a file replaced by a directory as deleted and changed", () => {
    const base = parseTree(
      listing(
        line("41ed", 1, 4096, T1, "./gone"),
        line("81a4", 2, 1, T1, "./gone/x"),
        line("81a4", 3, 1, T1, "./gone/deep/y"),
        line("81a4", 4, 1, T1, "./swap"),
        line("81a4", 5, 1, T1, "./kept"),
      ),
    );
    const next = parseTree(listing(line("41ed", 6, 4096, T2, "./swap"), line("81a4", 5, 1, T1, "./kept")));
    expect(base && next && diffTrees(base, next)).toEqual({ changed: ["./swap"], deleted: ["./gone", "./swap"] });
  });

  it("refuses a listing with a line that is not one entry (a name holding a newline)", () => {
    expect(parseTree(listing(line("81a4", 1, 1, T1, "./a\nb")))).toBeNull();
    expect(parseTree("")).toBeNull();
    expect(parseTree(listing(line("81a4", 1, 1, T1, "./a|b")))?.has("./a|b")).toBe(true);
  });

  it("frames a diff as its deletions then the archive, and refuses deletions outside the workspace", () => {
    const archive = new Uint8Array([0x1f, 0x8b, 1, 2, 0x0a, 3]);
    const decoded = decodeDiff(encodeDiff(["./a.txt"], archive));
    expect(decoded.deleted).toEqual(["./a.txt"]);
    expect([...decoded.archive]).toEqual([...archive]);
    expect(decodeDiff(encodeDiff([], new Uint8Array(0))).archive.byteLength).toBe(0);
    expect(() => decodeDiff(encodeDiff(["./../etc"], archive))).toThrow(/not paths/);
    expect(() => decodeDiff(encodeDiff(["/etc"], archive))).toThrow(/not paths/);
    expect(() => decodeDiff(archive)).toThrow(/not a workspace diff/);
  });
});

/**
 * The pure half of workspace diffs (sandbox-host/runner/workspace-diff.ts): the tree a sandbox's
 * listing gives, what changed between two, and the diff blob's framing. The end-to-end chain
 * (real Docker, a recovery) is in test/integration/workspace-snapshots.test.ts.
 */
import { describe, expect, it } from "vitest";
import { changedSince, decodeDiff, diffTrees, encodeDiff, parseTree } from "../../sandbox-host/runner/workspace-diff";

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
    expect(racy?.entries.get("./hot.txt")).toBe(`${0o100000}?`);
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
    expect(parseTree(listing(line("81a4", 1, 1, T1, "./a|b")))?.entries.has("./a|b")).toBe(true);
  });

  it("selects by ctime since the base's marker exactly the entries diffTrees counts as changed", () => {
    const M2 = "2026-12-05 19:29:31.000000000 +0000";
    const T3 = "2026-12-05 19:29:30.600000000 +0000";
    // The base: one settled file, one stamped at its marker (unknown), one about to go.
    const base = parseTree(
      listing(
        line("81a4", 1, 3, T1, "./settled"),
        line("81a4", 2, 3, MARK, "./racy"),
        line("81a4", 3, 3, T1, "./gone"),
      ),
    );
    // Since: the settled file untouched, the racy one untouched (its ctime still the base's
    // marker), a new file and a rewritten one stamped after it; ./gone deleted.
    const next = parseTree(
      `${M2}\n${[
        line("81a4", 1, 3, T1, "./settled"),
        line("81a4", 2, 3, MARK, "./racy"),
        line("81a4", 4, 9, T3, "./new"),
        line("41ed", 5, 4096, T3, "./dir"),
      ].join("\n")}\n`,
    );
    if (!base || !next) throw new Error("listings did not parse");
    const diff = diffTrees(base, next);
    expect(diff).toEqual({ changed: ["./racy", "./new", "./dir"], deleted: ["./gone"] });
    expect(changedSince(next, base.mark)).toEqual(diff.changed);
    // Against a later marker the racy entry is old news: the selection is no longer the changed
    // set, and the host would not use the sandbox's archive (workspace.ts takeSnapshot).
    expect(changedSince(next, T3)).toEqual(["./new", "./dir"]);
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

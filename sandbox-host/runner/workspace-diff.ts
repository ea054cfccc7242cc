/**
 * What changed in /workspace between two snapshots (docs/sandboxes.md "Workspace snapshots"): the
 * pure half of workspace.ts. A tree is the sandbox's listing (`SandboxManager.listTree`) as a map
 * from each entry's `./`-relative path to its signature: type and mode, inode, size, mtime and
 * ctime to the nanosecond. ctime is the kernel's (no `touch -d` sets it), so any write, chmod,
 * rename or replacement changes the signature; an entry whose ctime is at or after the marker
 * touched just before the walk may still change within the same clock tick without changing its
 * ctime (the coarse clock steps every few ms), so it is kept as "unknown" and counted as changed
 * by the next diff (git's "racily clean" index entries, the same cure).
 *
 * A diff blob is one line of JSON (`{"deleted":[…]}`: the paths gone, or replaced by another type,
 * since the base, an ancestor standing for its descendants) then the gzipped tar of the changed
 * entries (none descended: a changed directory is only its own header). A full snapshot's blob is
 * the gzipped tar of the whole tree, as before diffs existed.
 */

/** A signature the next diff always counts as changed (see above). */
const UNKNOWN = "?";

/** `%f|%i|%s|%y|%z|%n`: raw mode (hex), inode, size, mtime, ctime, then the name (which may hold `|`). */
const LINE = /^([0-9a-f]+)\|(\d+)\|(\d+)\|([^|]+)\|([^|]+)\|(\.\/.*)$/;

/** A listing: its marker's ctime, and path → signature (`UNKNOWN` for an entry that may change unseen). */
export interface Tree {
  mark: string;
  entries: Map<string, string>;
}

/**
 * The tree from a listing, or null when a line is not one entry (a name holding a newline): the
 * caller then takes a full snapshot and keeps no tree, so the next one is full as well.
 */
export function parseTree(listing: string): Tree | null {
  const lines = listing.split("\n");
  const mark = lines[0]?.trim() ?? "";
  if (mark === "") return null;
  const entries = new Map<string, string>();
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i] as string;
    if (line === "" && i === lines.length - 1) break;
    const m = LINE.exec(line);
    if (!m) return null;
    const [, mode, ino, size, mtime, ctime, name] = m as unknown as [
      string,
      string,
      string,
      string,
      string,
      string,
      string,
    ];
    // Same zone and fixed width (busybox prints nine digits), so the strings compare as times.
    entries.set(name, ctime >= mark ? `${typeOf(mode)}${UNKNOWN}` : `${mode}|${ino}|${size}|${mtime}|${ctime}`);
  }
  return { mark, entries };
}

/**
 * The entries of `tree` whose ctime is at or after `since` (an earlier listing's mark), in the
 * listing's order: what the sandbox's one-exec snapshot packs as a diff (`snapshotTree`). Each
 * is `diffTrees`' changed set against the listing that `since` marks, given a clock that does
 * not step back: a change after that listing's marker gave its entry a ctime at or past it (any
 * write, chmod, rename or new inode), and an entry it saw with such a ctime it kept as unknown.
 * The host checks the two agree before it trusts the sandbox's selection.
 */
export function changedSince(tree: Tree, since: string): string[] {
  const out: string[] = [];
  for (const [path, sig] of tree.entries) {
    if (sig.endsWith(UNKNOWN) || ctimeOf(sig) >= since) out.push(path);
  }
  return out;
}

function ctimeOf(sig: string): string {
  return sig.split("|")[4] ?? "";
}

/** The file type bits of a signature (`S_IFMT`), so a file replaced by a directory is a deletion too. */
function typeOf(sig: string): string {
  const mode = Number.parseInt(sig.slice(0, sig.indexOf("|") === -1 ? sig.length : sig.indexOf("|")), 16);
  return Number.isNaN(mode) ? "" : String(mode & 0o170000);
}

/** The type of a stored signature (the `UNKNOWN` form keeps the type before its marker). */
function storedType(sig: string): string {
  return sig.endsWith(UNKNOWN) ? sig.slice(0, -UNKNOWN.length) : typeOf(sig);
}

export interface TreeDiff {
  /** Entries new or changed since the base, parents before children (the listing's order). */
  changed: string[];
  /** Entries gone or of another type since the base, none under another (`rm -rf` takes those). */
  deleted: string[];
}

/** What changed from `base` to `next`. */
export function diffTrees(base: Tree, next: Tree): TreeDiff {
  const changed: string[] = [];
  const gone = new Set<string>();
  for (const [path, sig] of next.entries) {
    const was = base.entries.get(path);
    if (was === undefined || was !== sig || sig.endsWith(UNKNOWN)) changed.push(path);
    if (was !== undefined && storedType(was) !== storedType(sig)) gone.add(path);
  }
  for (const path of base.entries.keys()) if (!next.entries.has(path)) gone.add(path);
  const deleted = [...gone].filter((path) => !hasAncestorIn(path, gone)).sort();
  return { changed, deleted };
}

function hasAncestorIn(path: string, set: ReadonlySet<string>): boolean {
  for (let i = path.lastIndexOf("/"); i > 1; i = path.lastIndexOf("/", i - 1)) {
    if (set.has(path.slice(0, i))) return true;
  }
  return false;
}

/** The bytes the paths take as arguments of one exec (each NUL-terminated). */
export function argBytes(paths: readonly string[]): number {
  let n = 0;
  for (const p of paths) n += Buffer.byteLength(p) + 1;
  return n;
}

/** A diff blob: the JSON line of deletions, then the gzipped tar of the changes (maybe empty). */
export function encodeDiff(deleted: readonly string[], archive: Uint8Array): Uint8Array<ArrayBuffer> {
  const head = Buffer.from(`${JSON.stringify({ deleted })}\n`, "utf8");
  return new Uint8Array(Buffer.concat([head, archive]));
}

export function decodeDiff(blob: Uint8Array): { deleted: string[]; archive: Uint8Array } {
  const nl = blob.indexOf(0x0a);
  if (blob[0] !== 0x7b || nl === -1) throw new Error("not a workspace diff");
  const head = JSON.parse(Buffer.from(blob.subarray(0, nl)).toString("utf8")) as { deleted?: unknown };
  const deleted = head.deleted;
  if (
    !Array.isArray(deleted) ||
    !deleted.every((p) => typeof p === "string" && p.startsWith("./") && !p.includes("/../"))
  ) {
    throw new Error("a workspace diff's deletions are not paths of the workspace");
  }
  return { deleted, archive: blob.subarray(nl + 1) };
}

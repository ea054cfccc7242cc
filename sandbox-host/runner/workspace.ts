/**
 * Workspace snapshots at step boundaries (docs/sandboxes.md "Workspace snapshots"). After a tool
 * step that may have changed /workspace (a `shell` or `write_file` call, its result journaled),
 * and at a suspend and a hand-off, the host has the sandbox `tar -cz` its /workspace (the
 * compression runs in the sandbox, not on the host's loop), hashes it (WebCrypto, off the loop)
 * and, when it differs from the run's last snapshot, stores it as a blob of the tenant (reserved
 * against the storage cap, uploaded through the gateway into R2) and journals its reference as a
 * `snapshot` row after the step. An execution that continues the job (a recovery, a resume after
 * a wait, a hand-off's next execution) finds the last one in the journal and unpacks it into its
 * new sandbox before its first tool call; then `run.recovered.sandbox_reset` is false and the
 * model is not told of a reset.
 *
 * A snapshot is a diff when it can be: the entries changed or added since the run's previous
 * snapshot (found from a listing of the tree, workspace-diff.ts) and the paths deleted, on top of
 * a chain that starts with a full archive of the workspace. The row names its base (`base`: the
 * chain before it, the full first), so a restore fetches and applies the chain in order. A chain
 * is cut to a fresh full snapshot after MAX_CHAIN_DIFFS diffs, or once its diffs together weigh
 * as much as its full (a restore then fetches more than twice what one full archive would be).
 * SANDBOX_WORKSPACE_MAX_BYTES bounds the full archive, and a whole chain: a diff that would take
 * the chain past it is a full snapshot instead; a workspace whose full archive passes it is not
 * snapshotted (logged), and a continuation from it resets the sandbox as before and says so.
 *
 * A step's snapshot is one exec in the sandbox (`snapshotTree`: the listing, then the archive),
 * not a listing and then a pack: each `docker exec` costs the engine (dockerd, containerd, runc)
 * more CPU than the command, and at 100 tool runs at once the second exec per step was what the
 * machine ran out of (docs/capacity.md). The sandbox packs what it selects by ctime against the
 * previous listing's marker, which is the host's changed set (workspace-diff.ts `changedSince`);
 * the host checks that before it stores the diff.
 */
import { reserveBlob } from "../../src/db/artifacts-repo";
import { lastConversationSnapshot } from "../../src/db/journal-repo";
import type { RunnableJob } from "../../src/db/run-repo";
import { toHex } from "../../src/domain/hex";
import { errorFields } from "../log";
import type { SandboxManager, TreeSnapshot } from "../sandbox/manager";
import { WORKSPACE } from "../sandbox/profile";
import { SandboxError } from "../sandbox/sandbox-errors";
import { snapshotFromPayload, type WorkspaceLink, type WorkspaceSnapshot } from "./journal";
import type { Execution } from "./run-context";
import { argBytes, changedSince, decodeDiff, diffTrees, encodeDiff, parseTree, type Tree } from "./workspace-diff";

/** The sandbox tools that may change /workspace (read_file and list_dir do not). */
export const WORKSPACE_WRITERS: ReadonlySet<string> = new Set(["shell", "write_file"]);

/** How long packing or unpacking the workspace may take. */
const WORKSPACE_EXEC_TIMEOUT_MS = 60_000;

/**
 * Diffs on one full snapshot before the chain is cut to a new full. Each link of a chain costs a
 * restore one blob read and one exec (~100–200 ms in `bench:workspace`), while each diff saves its
 * step the full's pack time and bytes; steps outnumber restores (docs/sandboxes.md "Workspace
 * snapshots" has the figures).
 */
export const MAX_CHAIN_DIFFS = 10;

/** A tree listing larger than this (a workspace of ~100k entries) is not diffed: the snapshot is full. */
const TREE_LISTING_MAX_BYTES = 8 * 1024 * 1024;

/**
 * The paths a diff may name as one exec's arguments (its changed entries when packed, its
 * deletions when restored): well under Linux's 2 MiB for argv and environment; past it the
 * snapshot is full (it changed most files).
 */
const DIFF_ARG_MAX_BYTES = 256 * 1024;

/**
 * Snapshot the run's workspace and journal it; a no-op when the run has no sandbox, nothing to
 * store it with, or an unchanged workspace. A failure is logged and leaves the last snapshot the
 * one a continuation restores (it is never the run's failure).
 */
export async function snapshotWorkspace(exec: Execution): Promise<void> {
  const { deps, run, id } = exec;
  const settings = deps.artifacts;
  run.workspaceDirty = false;
  if (!settings || !deps.sandbox || !run.sandboxUsed || !run.owned || run.pendingRestore || run.conversationRestore)
    return;
  try {
    const took = await takeSnapshot(
      deps.sandbox,
      id.executionId,
      { tree: run.workspaceTree, chain: run.workspaceChain },
      { maxBytes: settings.snapshotMaxBytes, warn: (msg, fields) => deps.log.warn(msg, { ...exec.fields, ...fields }) },
    );
    if (took.kind === "no workspace") return;
    if (took.kind === "too large") {
      deps.log.warn("workspace not snapshotted: larger than SANDBOX_WORKSPACE_MAX_BYTES", {
        ...exec.fields,
        max_bytes: settings.snapshotMaxBytes,
      });
      return;
    }
    if (took.kind === "unchanged") {
      run.workspaceTree = took.tree;
      return;
    }
    const { blob, tree } = took;
    const base = took.kind === "diff" ? run.workspaceChain : [];
    const sha256 = toHex(await crypto.subtle.digest("SHA-256", blob));
    if (sha256 === run.lastSnapshot) {
      run.workspaceTree = tree;
      return;
    }
    const tenantId = exec.job.tenantId;
    if ((await reserveBlob(deps.db, tenantId, sha256, blob.byteLength, settings.tenantCapBytes)) === "over_cap") {
      deps.log.warn("workspace not snapshotted: the tenant's storage is at TENANT_STORAGE_MAX_BYTES", exec.fields);
      return;
    }
    await settings.store.put(tenantId, sha256, blob);
    const payload: WorkspaceSnapshot = { sha256, bytes: blob.byteLength };
    if (base.length > 0) payload.base = base;
    if (await exec.journal.write({ kind: "snapshot", payload })) {
      run.lastSnapshot = sha256;
      run.workspaceChain = [...base, { sha256, bytes: blob.byteLength }];
      run.workspaceTree = tree;
    }
  } catch (err) {
    deps.log.warn("workspace not snapshotted", { ...exec.fields, ...errorFields(err) });
  }
}

/** What one snapshot step made, before it is stored. */
export type SnapshotTake =
  | { kind: "no workspace" }
  | { kind: "too large" }
  /** Nothing changed since `prior.tree`: nothing to store; `tree` is the next diff's base. */
  | { kind: "unchanged"; tree: Tree }
  /**
   * A blob to store: a full archive (a chain of its own) or a diff on `prior.chain`. `tree` is
   * the next diff's base (null: the next snapshot is full). `execs`: the sandbox commands it took
   * (1, unless the sandbox's selection could not be used and the archive was packed again).
   */
  | { kind: "full" | "diff"; blob: Uint8Array<ArrayBuffer>; tree: Tree | null; execs: number };

/**
 * One snapshot step: the run's workspace listed and packed in one sandbox exec (`snapshotTree`),
 * as a diff on `prior` when it can be (see the file's head), else whole. The host decides from the
 * listing what changed and what was deleted (`diffTrees`), and uses the sandbox's archive of the
 * entries it selected by ctime only when that selection is exactly the changed set
 * (`changedSince`); otherwise, and for a diff that would take the chain past `maxBytes` or name
 * too many deletions, it packs the whole workspace in a second exec. `warn`: a selection that was
 * not the changed set (a clock stepped back), logged.
 */
export async function takeSnapshot(
  sandbox: SandboxManager,
  runId: string,
  prior: { tree: Tree | null; chain: readonly WorkspaceLink[] },
  opts: { maxBytes: number; warn?: (msg: string, fields: Record<string, unknown>) => void },
): Promise<SnapshotTake> {
  const { maxBytes, warn = () => {} } = opts;
  const [full, ...diffs] = prior.chain;
  const diffBytes = diffs.reduce((n, l) => n + l.bytes, 0);
  // Diff only on a chain with a base tree; a chain due to be cut gets a full archive, or none
  // when nothing changed (a step that changed nothing does not cut it).
  const since = full && prior.tree ? prior.tree.mark : null;
  const cut = full !== undefined && (diffs.length >= MAX_CHAIN_DIFFS || diffBytes >= full.bytes);
  const budget = full ? maxBytes - full.bytes - diffBytes : maxBytes;
  let took: TreeSnapshot | null;
  try {
    took = await sandbox.snapshotTree(runId, WORKSPACE, {
      since,
      cut,
      maxListingBytes: TREE_LISTING_MAX_BYTES,
      maxArchiveBytes: maxBytes,
      maxArgBytes: DIFF_ARG_MAX_BYTES,
      timeoutMs: WORKSPACE_EXEC_TIMEOUT_MS,
    });
  } catch (err) {
    // A listing that fails (say /tmp, where the marker and the listing go, is full) costs a full
    // snapshot in a second exec, not the snapshot; the next one is full too (no tree).
    if (!(err instanceof SandboxError && err.code === "exec_failed")) throw err;
    warn("workspace tree not listed: the snapshot is full", { error: err.message });
    return packWhole(sandbox, runId, maxBytes, null);
  }
  if (took === null) return { kind: "no workspace" };
  if (took.tooLarge) return { kind: "too large" };
  // No tree (a listing past its cap, a name holding a newline): this snapshot and the next are full.
  const tree = took.listing === null ? null : parseTree(took.listing);
  const diff = tree && prior.tree ? diffTrees(prior.tree, tree) : null;
  if (diff && diff.changed.length === 0 && diff.deleted.length === 0) return { kind: "unchanged", tree: tree as Tree };
  if (took.mode === "full" && took.archive) return { kind: "full", blob: new Uint8Array(took.archive), tree, execs: 1 };
  if (took.mode === "diff" && diff && since !== null && tree && argBytes(diff.deleted) <= DIFF_ARG_MAX_BYTES) {
    const selected = changedSince(tree, since);
    if (selected.length === took.selected && samePaths(selected, diff.changed)) {
      const blob = encodeDiff(diff.deleted, took.archive ?? new Uint8Array(0));
      if (blob.byteLength <= budget) return { kind: "diff", blob, tree, execs: 1 };
    } else {
      warn("workspace diff not used: the sandbox's selection is not the changed set", {
        selected: took.selected,
        changed: diff.changed.length,
      });
    }
  }
  // A chain due to be cut with only deletions, a selection that differs, a diff past the budget.
  // The listing predates this archive; an entry changed in between has a ctime past its marker,
  // so the next diff takes it again (bytes, never a miss).
  return packWhole(sandbox, runId, maxBytes, tree);
}

/** The whole workspace packed in an exec of its own (the step's second), `tree` the next base. */
async function packWhole(
  sandbox: SandboxManager,
  runId: string,
  maxBytes: number,
  tree: Tree | null,
): Promise<SnapshotTake> {
  const packed = await sandbox.packDir(runId, WORKSPACE, maxBytes, {
    gzip: true,
    timeoutMs: WORKSPACE_EXEC_TIMEOUT_MS,
  });
  if (packed.tooLarge) return { kind: "too large" };
  if (!packed.archive) return { kind: "no workspace" };
  return { kind: "full", blob: new Uint8Array(packed.archive), tree, execs: 2 };
}

/** The workspace's tree after a restore; null when it cannot be had (the next snapshot is then full). */
async function listTree(exec: Execution): Promise<Tree | null> {
  const { deps, id } = exec;
  if (!deps.sandbox) return null;
  try {
    const l = await deps.sandbox.listTree(id.executionId, WORKSPACE, TREE_LISTING_MAX_BYTES, {
      timeoutMs: WORKSPACE_EXEC_TIMEOUT_MS,
    });
    return l.tooLarge || l.listing === null ? null : parseTree(l.listing);
  } catch (err) {
    deps.log.warn("workspace tree not listed: the next snapshot is full", { ...exec.fields, ...errorFields(err) });
    return null;
  }
}

function samePaths(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((p, i) => p === b[i]);
}

/** Apply one blob of a chain to the run's workspace: the first is a full archive, the rest diffs. */
export async function unpackLink(
  sandbox: SandboxManager,
  runId: string,
  blob: Uint8Array,
  first: boolean,
): Promise<void> {
  const { deleted, archive } = first ? { deleted: [], archive: blob } : decodeDiff(blob);
  await sandbox.unpackDir(runId, WORKSPACE, archive, { remove: deleted, timeoutMs: WORKSPACE_EXEC_TIMEOUT_MS });
}

/**
 * The job's agent keeps one workspace per conversation (`workspace: "conversation"`) and the job
 * is in one. Versions stored before the field existed have no `workspace`: they are `run`.
 */
export function keepsConversationWorkspace(job: RunnableJob): boolean {
  return job.conversationId !== null && job.agent?.definition.workspace === "conversation";
}

/**
 * Unpack the snapshot this run continues from into its sandbox (called before its first tool
 * call, the sandbox just made): its own (a recovery's, a resume's), else, for a conversation
 * workspace, the conversation's last (journal-repo.ts `lastConversationSnapshot`). A diff's chain
 * is applied in order, the full archive first. Throws when a blob cannot be read or unpacked: the
 * run then fails `sandbox_error` (tool-step.ts, `isRunFatal`), rather than running against an
 * empty or half-restored workspace the model was told nothing about.
 */
export async function restoreWorkspace(exec: Execution): Promise<void> {
  const { deps, run, id } = exec;
  let snapshot = run.pendingRestore;
  const fromConversation = snapshot === null && run.conversationRestore;
  const settings = deps.artifacts;
  if (!settings || !deps.sandbox) return;
  const { conversationId, tenantId } = exec.job;
  if (fromConversation && conversationId !== null) {
    const found = await lastConversationSnapshot(deps.db, { jobId: id.jobId, tenantId, conversationId });
    if (found) snapshot = snapshotFromPayload(found.payload);
  }
  if (!snapshot) {
    run.conversationRestore = false;
    return;
  }
  // The flags stay set until the unpack succeeded: a failed restore fails the run, and its final
  // snapshot (snapshotWorkspace skips while a restore is owed) must not journal the empty
  // workspace as the job's, or as the conversation's.
  const started = performance.now();
  const chain: WorkspaceLink[] = [...(snapshot.base ?? []), { sha256: snapshot.sha256, bytes: snapshot.bytes }];
  for (const [i, link] of chain.entries()) {
    const blob = await settings.store.get(tenantId, link.sha256);
    if (!blob) throw new Error(`the workspace snapshot ${link.sha256} is not in the blob store`);
    await unpackLink(deps.sandbox, id.executionId, blob, i === 0);
  }
  run.pendingRestore = null;
  run.conversationRestore = false;
  run.lastSnapshot = snapshot.sha256;
  run.workspaceChain = chain;
  // The restored tree is the next diff's base (the unpack gave every entry a new ctime). Without
  // it the next snapshot is full: a failed listing costs bytes, never the restore.
  run.workspaceTree = await listTree(exec);
  // The conversation's snapshot becomes this job's too (the blobs are already stored), each link
  // of its chain a row of this job's journal: a recovery of this job restores it rather than
  // resetting, a job that only reads leaves it the conversation's last for the next job either
  // way, and every blob of the chain stays named by a row of a job that has it (the collection
  // looks at rows' `sha256`, artifacts-repo.ts) when the older job's journal is purged.
  if (fromConversation) {
    for (const [i, link] of chain.entries()) {
      const row: WorkspaceSnapshot = i === 0 ? { ...link } : { ...link, base: chain.slice(0, i) };
      if (i < chain.length - 1) exec.journal.note({ kind: "snapshot", payload: row });
      else await exec.journal.write({ kind: "snapshot", payload: row });
    }
  }
  deps.log.info("workspace restored", {
    ...exec.fields,
    from: fromConversation ? "conversation" : "journal",
    bytes: chain.reduce((n, l) => n + l.bytes, 0),
    links: chain.length,
    ms: Math.round(performance.now() - started),
  });
}

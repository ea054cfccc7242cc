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
 * The archive is the whole workspace, not a diff against the previous one: the small
 * workspaces this runs at compress to little, and every snapshot stands alone (no chain to
 * restore, no base to keep). A workspace whose archive passes SANDBOX_WORKSPACE_MAX_BYTES is not
 * snapshotted (logged); a continuation from it resets the sandbox as before and says so.
 */
import { reserveBlob } from "../../src/db/artifacts-repo";
import { lastConversationSnapshot } from "../../src/db/journal-repo";
import type { RunnableJob } from "../../src/db/run-repo";
import { toHex } from "../../src/domain/hex";
import { errorFields } from "../log";
import { WORKSPACE } from "../sandbox/profile";
import type { Execution } from "./run-context";

/** The sandbox tools that may change /workspace (read_file and list_dir do not). */
export const WORKSPACE_WRITERS: ReadonlySet<string> = new Set(["shell", "write_file"]);

/** How long packing or unpacking the workspace may take. */
const WORKSPACE_EXEC_TIMEOUT_MS = 60_000;

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
    const packed = await deps.sandbox.packDir(id.executionId, WORKSPACE, settings.snapshotMaxBytes, {
      gzip: true,
      timeoutMs: WORKSPACE_EXEC_TIMEOUT_MS,
    });
    if (packed.tooLarge) {
      deps.log.warn("workspace not snapshotted: larger than SANDBOX_WORKSPACE_MAX_BYTES", {
        ...exec.fields,
        max_bytes: settings.snapshotMaxBytes,
      });
      return;
    }
    if (!packed.archive) return;
    const bytes = new Uint8Array(packed.archive);
    const sha256 = toHex(await crypto.subtle.digest("SHA-256", bytes));
    if (sha256 === run.lastSnapshot) return;
    const tenantId = exec.job.tenantId;
    if ((await reserveBlob(deps.db, tenantId, sha256, bytes.byteLength, settings.tenantCapBytes)) === "over_cap") {
      deps.log.warn("workspace not snapshotted: the tenant's storage is at TENANT_STORAGE_MAX_BYTES", exec.fields);
      return;
    }
    await settings.store.put(tenantId, sha256, bytes);
    if (await exec.journal.write({ kind: "snapshot", payload: { sha256, bytes: bytes.byteLength } })) {
      run.lastSnapshot = sha256;
    }
  } catch (err) {
    deps.log.warn("workspace not snapshotted", { ...exec.fields, ...errorFields(err) });
  }
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
 * workspace, the conversation's last (journal-repo.ts `lastConversationSnapshot`). Throws when
 * the blob cannot be read or unpacked: the run then fails `sandbox_error` (tool-step.ts,
 * `isRunFatal`), rather than running against an empty workspace the model was told nothing about.
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
    if (found) snapshot = { sha256: String(found.payload.sha256), bytes: Number(found.payload.bytes) };
  }
  if (!snapshot) {
    run.conversationRestore = false;
    return;
  }
  // The flags stay set until the unpack succeeded: a failed restore fails the run, and its final
  // snapshot (snapshotWorkspace skips while a restore is owed) must not journal the empty
  // workspace as the job's, or as the conversation's.
  const started = performance.now();
  const bytes = await settings.store.get(exec.job.tenantId, snapshot.sha256);
  if (!bytes) throw new Error(`the workspace snapshot ${snapshot.sha256} is not in the blob store`);
  await deps.sandbox.unpackDir(id.executionId, WORKSPACE, bytes, { timeoutMs: WORKSPACE_EXEC_TIMEOUT_MS });
  run.pendingRestore = null;
  run.conversationRestore = false;
  run.lastSnapshot = snapshot.sha256;
  // The conversation's snapshot becomes this job's too (the blob is already stored): a recovery
  // of this job restores it rather than resetting, and a job that only reads leaves it the
  // conversation's last for the next job either way.
  if (fromConversation) await exec.journal.write({ kind: "snapshot", payload: snapshot });
  deps.log.info("workspace restored", {
    ...exec.fields,
    from: fromConversation ? "conversation" : "journal",
    bytes: snapshot.bytes,
    ms: Math.round(performance.now() - started),
  });
}

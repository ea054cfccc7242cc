/**
 * File tools inside the sandbox, over exec: bytes travel raw on the exec's stdin/stdout (no TTY,
 * no re-encoding), so binary content round-trips. Paths are confined to /workspace twice: here,
 * lexically (a `..` escape is rejected before anything runs), and in the container, by resolving
 * symlinks with `realpath` (a link the model made to /etc is refused too).
 */
import { posix } from "node:path";
import type Docker from "dockerode";
import { type RawExecResult, runExec } from "./exec";
import { WORKSPACE } from "./profile";
import { SandboxError } from "./sandbox-errors";

/** Absolute, normalized path inside /workspace, or a SandboxError. Relative paths are relative to /workspace. */
export function workspacePath(path: string, runId?: string): string {
  if (typeof path !== "string" || path.length === 0 || path.includes("\0")) {
    throw new SandboxError("invalid_input", "path must be a non-empty string without NUL bytes", { runId });
  }
  const abs = posix.resolve(WORKSPACE, path);
  if (abs !== WORKSPACE && !abs.startsWith(`${WORKSPACE}/`)) {
    throw new SandboxError("path_outside_workspace", `path "${path}" resolves to ${abs}, outside ${WORKSPACE}`, {
      runId,
    });
  }
  return abs;
}

// Exit codes the scripts below use for the model's mistakes.
const OUTSIDE = 3;
const NOT_FOUND = 4;
const NOT_A_FILE = 5;
const NOT_A_DIR = 6;

const CONFINE = `inside() { case "$1/" in ${WORKSPACE}/*) return 0;; *) return 1;; esac; }`;

const READ_SCRIPT = `${CONFINE}
[ -e "$1" ] || exit ${NOT_FOUND}
r=$(realpath "$1") || exit ${NOT_FOUND}
inside "$r" || exit ${OUTSIDE}
[ -f "$r" ] || exit ${NOT_A_FILE}
stat -c %s "$r" >&2
exec head -c "$2" "$r"`;

const WRITE_SCRIPT = `${CONFINE}
a=$(dirname "$1")
while [ ! -e "$a" ]; do a=$(dirname "$a"); done
ra=$(realpath "$a") || exit ${NOT_FOUND}
inside "$ra" || exit ${OUTSIDE}
if [ -L "$1" ]; then r=$(realpath "$1" 2>/dev/null) || exit ${OUTSIDE}; inside "$r" || exit ${OUTSIDE}; fi
d=$(dirname "$1")
if [ ! -e "$d" ]; then [ "$2" = 1 ] || exit ${NOT_FOUND}; mkdir -p "$d" || exit ${NOT_A_DIR}; fi
[ -d "$d" ] || exit ${NOT_A_DIR}
[ -d "$1" ] && exit ${NOT_A_FILE}
cat > "$1" || exit 1
stat -c %s "$1"`;

const LIST_SCRIPT = `${CONFINE}
[ -e "$1" ] || exit ${NOT_FOUND}
r=$(realpath "$1") || exit ${NOT_FOUND}
inside "$r" || exit ${OUTSIDE}
[ -d "$r" ] || exit ${NOT_A_DIR}
cd "$r" || exit ${NOT_A_DIR}
n=0
for f in * .[!.]* ..?*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  n=$((n+1))
  if [ "$n" -gt "$2" ]; then echo more >&2; break; fi
  if [ -L "$f" ]; then t=symlink; elif [ -d "$f" ]; then t=dir; elif [ -f "$f" ]; then t=file; else t=other; fi
  printf '%s/%s/%s\\0' "$t" "$(stat -c %s "$f")" "$f"
done`;

export interface ReadFileResult {
  path: string;
  /** Size of the whole file. */
  size: number;
  data: Buffer;
  truncated: boolean;
}

export interface WriteFileResult {
  path: string;
  size: number;
}

export interface DirEntry {
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
}

export interface ListDirResult {
  path: string;
  entries: DirEntry[];
  truncated: boolean;
}

export interface FileOpContext {
  docker: Docker;
  containerId: string;
  user: string;
  runId: string;
  timeoutMs: number;
  signal?: AbortSignal;
}

export async function readFile(ctx: FileOpContext, path: string, maxBytes: number): Promise<ReadFileResult> {
  const abs = workspacePath(path, ctx.runId);
  const r = await script(ctx, READ_SCRIPT, [abs, String(maxBytes)], { capBytes: maxBytes });
  check(r, ctx, abs, "read");
  const size = Number(r.stderr.toString().trim());
  return { path: abs, size, data: r.stdout, truncated: size > r.stdout.length };
}

export async function writeFile(
  ctx: FileOpContext,
  path: string,
  data: Uint8Array,
  createParents: boolean,
): Promise<WriteFileResult> {
  const abs = workspacePath(path, ctx.runId);
  if (abs === WORKSPACE) throw new SandboxError("not_a_file", `${abs} is a directory`, { runId: ctx.runId });
  const r = await script(ctx, WRITE_SCRIPT, [abs, createParents ? "1" : "0"], { capBytes: 4096, stdin: data });
  check(r, ctx, abs, "write");
  return { path: abs, size: Number(r.stdout.toString().trim()) };
}

export async function listDir(ctx: FileOpContext, path: string, maxEntries: number): Promise<ListDirResult> {
  const abs = workspacePath(path, ctx.runId);
  const r = await script(ctx, LIST_SCRIPT, [abs, String(maxEntries)], { capBytes: 8 * 1024 * 1024 });
  check(r, ctx, abs, "list");
  const entries: DirEntry[] = [];
  for (const rec of r.stdout.toString("utf8").split("\0")) {
    const m = /^(file|dir|symlink|other)\/(\d+)\/(.*)$/s.exec(rec);
    if (m) entries.push({ type: m[1] as DirEntry["type"], size: Number(m[2]), name: m[3]! });
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { path: abs, entries, truncated: r.stderr.toString().includes("more") };
}

function script(
  ctx: FileOpContext,
  body: string,
  args: string[],
  opts: { capBytes: number; stdin?: Uint8Array },
): Promise<RawExecResult> {
  return runExec(ctx.docker, ctx.containerId, {
    argv: ["/bin/sh", "-c", body, "sandbox-file-op", ...args],
    stdin: opts.stdin,
    capBytes: opts.capBytes,
    timeoutMs: ctx.timeoutMs,
    signal: ctx.signal,
    user: ctx.user,
  });
}

function check(r: RawExecResult, ctx: FileOpContext, abs: string, op: string): void {
  const runId = ctx.runId;
  if (r.cancelled) throw new SandboxError("exec_failed", `${op} of ${abs} was cancelled`, { runId });
  if (r.timedOut)
    throw new SandboxError("exec_failed", `${op} of ${abs} timed out after ${ctx.timeoutMs} ms`, { runId });
  switch (r.exitCode) {
    case 0:
      return;
    case OUTSIDE:
      throw new SandboxError("path_outside_workspace", `${abs} resolves (through a symlink) outside ${WORKSPACE}`, {
        runId,
      });
    case NOT_FOUND:
      throw new SandboxError("not_found", `${abs} does not exist`, { runId });
    case NOT_A_FILE:
      throw new SandboxError("not_a_file", `${abs} is not a regular file`, { runId });
    case NOT_A_DIR:
      throw new SandboxError("not_a_directory", `${abs} is not a directory`, { runId });
    default:
      throw new SandboxError(
        "exec_failed",
        `${op} of ${abs} failed (exit ${r.exitCode}): ${r.stderr.toString("utf8").slice(0, 500)}`,
        { runId },
      );
  }
}

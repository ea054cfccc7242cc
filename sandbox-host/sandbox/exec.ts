/**
 * Runs one command in a sandbox through the Engine's exec API: stdin/stdout/stderr are a raw
 * multiplexed stream (no TTY), so bytes pass through unchanged. Every exec carries a random
 * marker in its environment; a timeout or an abort kills every process that inherited it (a
 * command's own background children included — a process holding the output pipe would
 * otherwise keep the exec open after its parent died).
 */
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import type Docker from "dockerode";
import { errorText, isNotFound } from "./docker";
import { SandboxError } from "./errors";
import { WORKSPACE } from "./profile";

export const EXEC_MARKER_ENV = "EAR_EXEC_ID";
/** How long to wait for the stream to close after a kill before dropping it. */
const AFTER_KILL_GRACE_MS = 5_000;

export interface RawExecRequest {
  argv: string[];
  stdin?: Uint8Array;
  timeoutMs: number;
  /** Bytes kept per stream; the rest is counted and dropped. */
  capBytes: number;
  signal?: AbortSignal;
  cwd?: string;
  user: string;
}

export interface RawExecResult {
  exitCode: number | null;
  stdout: Buffer;
  stderr: Buffer;
  stdoutBytes: number;
  stderrBytes: number;
  timedOut: boolean;
  cancelled: boolean;
  durationMs: number;
}

class CappedSink extends Writable {
  readonly chunks: Buffer[] = [];
  kept = 0;
  total = 0;
  constructor(private readonly cap: number) {
    super();
  }
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: () => void): void {
    this.total += chunk.length;
    const room = this.cap - this.kept;
    if (room > 0) {
      const part = chunk.length <= room ? chunk : chunk.subarray(0, room);
      this.chunks.push(part);
      this.kept += part.length;
    }
    cb();
  }
  buffer(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

export async function runExec(docker: Docker, containerId: string, req: RawExecRequest): Promise<RawExecResult> {
  const started = performance.now();
  const marker = randomUUID();
  const container = docker.getContainer(containerId);
  if (req.signal?.aborted) {
    return {
      exitCode: null,
      stdout: Buffer.alloc(0),
      stderr: Buffer.alloc(0),
      stdoutBytes: 0,
      stderrBytes: 0,
      timedOut: false,
      cancelled: true,
      durationMs: 0,
    };
  }
  let exec: Docker.Exec;
  let stream: NodeJS.ReadWriteStream;
  try {
    exec = await container.exec({
      Cmd: req.argv,
      AttachStdin: req.stdin !== undefined,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
      User: req.user,
      WorkingDir: req.cwd ?? WORKSPACE,
      Env: [`${EXEC_MARKER_ENV}=${marker}`],
    });
    stream = (await exec.start({ hijack: true, stdin: req.stdin !== undefined })) as NodeJS.ReadWriteStream;
  } catch (err) {
    throw execError(err, containerId);
  }

  const out = new CappedSink(req.capBytes);
  const errs = new CappedSink(req.capBytes);
  docker.modem.demuxStream(stream, out, errs);
  let timedOut = false;
  let cancelled = false;
  let killing: Promise<void> | null = null;
  const ended = new Promise<void>((resolve) => {
    stream.on("end", resolve);
    stream.on("close", resolve);
    stream.on("error", resolve);
  });
  const kill = () => {
    killing ??= killMarked(docker, containerId, marker, req.user).then(async () => {
      const late = await Promise.race([ended.then(() => false), delay(AFTER_KILL_GRACE_MS).then(() => true)]);
      if (late) (stream as unknown as { destroy(): void }).destroy();
    });
  };
  const timer = setTimeout(() => {
    timedOut = true;
    kill();
  }, req.timeoutMs);
  const onAbort = () => {
    cancelled = true;
    kill();
  };
  req.signal?.addEventListener("abort", onAbort, { once: true });

  if (req.stdin !== undefined) {
    // end() half-closes the hijacked connection: the engine closes the process's stdin.
    stream.write(Buffer.from(req.stdin.buffer, req.stdin.byteOffset, req.stdin.byteLength));
    stream.end();
  }
  await ended;
  clearTimeout(timer);
  req.signal?.removeEventListener("abort", onAbort);
  if (killing) await killing;

  let exitCode: number | null = null;
  try {
    for (let i = 0; i < 20; i++) {
      const info = await exec.inspect();
      if (!info.Running) {
        exitCode = info.ExitCode ?? null;
        break;
      }
      await delay(25);
    }
  } catch (err) {
    throw execError(err, containerId);
  }
  return {
    exitCode,
    stdout: out.buffer(),
    stderr: errs.buffer(),
    stdoutBytes: out.total,
    stderrBytes: errs.total,
    timedOut,
    cancelled,
    durationMs: Math.round(performance.now() - started),
  };
}

/**
 * Kills (SIGKILL) every process of the container whose environment carries the marker; repeats
 * while it finds any, so a process forked between scan and kill is caught on the next pass.
 */
const KILL_SCRIPT = `
m="${EXEC_MARKER_ENV}=$1"
for pass in 1 2 3 4 5; do
  found=""
  for f in $(grep -lzx "$m" /proc/[0-9]*/environ 2>/dev/null); do
    p="\${f#/proc/}"; p="\${p%/environ}"
    kill -KILL "$p" 2>/dev/null && found=1
  done
  [ -z "$found" ] && exit 0
done`;

/** Runs as the sandbox user: with every capability dropped, even root could not signal its processes. */
async function killMarked(docker: Docker, containerId: string, marker: string, user: string): Promise<void> {
  try {
    const exec = await docker.getContainer(containerId).exec({
      Cmd: ["/bin/sh", "-c", KILL_SCRIPT, "kill", marker],
      AttachStdout: true,
      AttachStderr: true,
      User: user,
    });
    const s = (await exec.start({ hijack: true, stdin: false })) as NodeJS.ReadableStream;
    s.resume();
    await new Promise<void>((resolve) => {
      s.on("end", resolve);
      s.on("close", resolve);
      s.on("error", resolve);
    });
  } catch {
    // The container is gone: so are its processes.
  }
}

function execError(err: unknown, containerId: string): SandboxError {
  if (isNotFound(err)) {
    return new SandboxError("sandbox_gone", `sandbox container ${containerId.slice(0, 12)} no longer exists`, {
      cause: err,
    });
  }
  return new SandboxError("exec_failed", `exec in sandbox failed: ${errorText(err)}`, { cause: err });
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Runs one command in a sandbox through the Engine's exec API: stdin/stdout/stderr are a raw
 * multiplexed stream (no TTY), so bytes pass through unchanged. A timeout or an abort kills every
 * process of the sandbox but its init and keeper (`killAll`), whatever the command did to hide
 * (env -i, setsid, double fork) or to block (filling the pids limit, stopping the keeper): a
 * process holding the output pipe would otherwise keep the exec open after its parent died, and
 * one left behind would hold the sandbox's pids and CPU for the rest of the run.
 */
import { Writable } from "node:stream";
import type Docker from "dockerode";
import { settlesWithin, sleep } from "../../src/domain/async";
import { dockerStatus, errorText, isNotFound } from "./docker";
import { KEEPER_SIGNAL, WORKSPACE } from "./profile";
import { SandboxError } from "./sandbox-errors";

/** How long to wait for the stream to close after a kill before dropping it. */
const AFTER_KILL_GRACE_MS = 5_000;
/**
 * How long the keeper gets to leave only itself behind before the container is restarted. The
 * whole kill took p95 130 ms here with the machine's load average near 20 (docs/sandboxes.md);
 * 2 s leaves room for a slower engine without making a sabotaged timeout much longer.
 */
const KEEPER_DEADLINE_MS = 2_000;
const KEEPER_POLL_MS = 50;

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
  /**
   * The container was restarted to end the command (its keeper was stopped or killed), or
   * because it had stopped: every process died, and so did the /workspace tmpfs.
   */
  sandboxRestarted: boolean;
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
  const container = docker.getContainer(containerId);
  try {
    const r = await runOnce(docker, containerId, req);
    if (!refusedByRuntime(r) || !(await stopsSoon(container))) return r;
  } catch (err) {
    if (!(NOT_STARTED.has(err as object) && (await stopsSoon(container)))) throw err;
  }
  // A command that killed every process it could (the keeper included) stopped the container:
  // tini exits with its only child. Depending on where the engine is in noticing, the next exec
  // is refused at create (409), at start (500) or by runc (exit 126); all three were seen here.
  // Start the container again rather than failing the run: only this error path pays for it, and
  // the command never ran, so it is safe to run it now.
  try {
    await container.start();
  } catch (err) {
    if (dockerStatus(err) !== 304) throw execError(err, containerId); // 304: already started
  }
  return { ...(await runOnce(docker, containerId, req)), sandboxRestarted: true };
}

/** Errors thrown before the command's process existed: only these may be retried. */
const NOT_STARTED = new WeakSet<object>();

/**
 * The runtime refused to start the exec's process: exit 126 (or none, when the engine dropped the
 * exec with the stopping container) with containerd's or runc's words ("cannot exec in a stopped
 * state", "… in a deleted state", "OCI runtime exec failed: … setns", all three seen with Docker
 * 20.10 while a container's PID 1 was exiting).
 */
function refusedByRuntime(r: RawExecResult): boolean {
  return (
    (r.exitCode === 126 || r.exitCode === null) &&
    !r.timedOut &&
    !r.cancelled &&
    /^(OCI runtime exec failed|cannot exec in a \w+ state)/.test(r.stdout.toString())
  );
}

/**
 * Whether the container is stopped, or stops within a second (its PID 1 already exited). An
 * engine error (the container is gone) is a no: the caller reports its own error.
 */
async function stopsSoon(container: Docker.Container): Promise<boolean> {
  try {
    for (let i = 0; i < 10; i++) {
      if (!(await container.inspect()).State.Running) return true;
      await sleep(100);
    }
  } catch {}
  return false;
}

async function runOnce(docker: Docker, containerId: string, req: RawExecRequest): Promise<RawExecResult> {
  const started = performance.now();
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
      sandboxRestarted: false,
      durationMs: 0,
    };
  }
  let sandboxRestarted = false;
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
    });
    stream = (await exec.start({ hijack: true, stdin: req.stdin !== undefined })) as NodeJS.ReadWriteStream;
  } catch (err) {
    const e = execError(err, containerId);
    NOT_STARTED.add(e);
    throw e;
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
  // An engine failure while killing is kept, not left unhandled, and reported once the stream is
  // closed: the command may have survived, so the caller gets an error, never a normal result.
  let killError: unknown = null;
  const kill = () => {
    killing ??= killAll(docker, containerId)
      .then(
        (restarted) => {
          if (restarted) sandboxRestarted = true;
        },
        (err) => {
          killError = err;
        },
      )
      .then(async () => {
        if (!(await settlesWithin(ended, AFTER_KILL_GRACE_MS))) (stream as unknown as { destroy(): void }).destroy();
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
  if (killError) throw execError(killError, containerId);

  let exitCode: number | null = null;
  try {
    for (let i = 0; i < 20; i++) {
      const info = await exec.inspect();
      if (!info.Running) {
        exitCode = info.ExitCode ?? null;
        break;
      }
      await sleep(25);
    }
  } catch (err) {
    // The engine forgets a container's execs when it stops or restarts (a command that killed
    // the keeper, or our own restart): the command is dead, its exit code unknown (null). A
    // removed container shows up as sandbox_gone on the next call.
    if (!isNotFound(err)) throw execError(err, containerId);
  }
  return {
    exitCode,
    stdout: out.buffer(),
    stderr: errs.buffer(),
    stdoutBytes: out.total,
    stderrBytes: errs.total,
    timedOut,
    cancelled,
    sandboxRestarted,
    durationMs: Math.round(performance.now() - started),
  };
}

/**
 * Ends every process of the sandbox except PID 1 (tini) and the keeper, from the host, through
 * the engine: the keeper is signalled, then `docker top` (the engine's view, so no trust in the
 * sandbox and no access to the host's /proc is needed) must show nothing but tini, the keeper and
 * at most its sleeper, none of them stopped. Otherwise — the keeper was stopped, traced or killed,
 * or the container stopped — the container is restarted: every process of its PID namespace dies
 * with PID 1, which no process inside can prevent. Returns whether it restarted.
 */
export async function killAll(docker: Docker, containerId: string): Promise<boolean> {
  const c = docker.getContainer(containerId);
  const deadline = performance.now() + KEEPER_DEADLINE_MS;
  try {
    for (;;) {
      const info = await c.inspect();
      if (!info.State.Running || info.State.Paused) break;
      // Sent on every pass: a fork racing the first kill(-1) is caught by the next.
      await c.kill({ signal: KEEPER_SIGNAL });
      await sleep(KEEPER_POLL_MS);
      const top = await c.top({ ps_args: "-o pid,ppid,stat" });
      if (onlyKeeperLeft(top.Processes ?? [], info.State.Pid)) return false;
      if (performance.now() >= deadline) break;
    }
    // t: 0 — nothing inside is asked to cooperate: SIGKILL to PID 1 at once.
    await c.restart({ t: 0 });
    return true;
  } catch (err) {
    // The container is gone: so are its processes.
    if (isNotFound(err)) return false;
    if (isNotRunning(err)) {
      await c.start().catch(() => {});
      return true;
    }
    throw err;
  }
}

/**
 * `docker top -o pid,ppid,stat` rows (host pids, only compared with each other and with the
 * engine's State.Pid of tini): tini, exactly one child of tini (the keeper; a command's orphan
 * would be a second one), and at most one child of the keeper (its sleeper). A stopped (T) or
 * traced (t) keeper counts as not done; a zombie (Z) means tini has not reaped yet.
 */
export function onlyKeeperLeft(rows: string[][], initPid: number): boolean {
  const procs = rows.map(([pid, ppid, stat]) => ({ pid: Number(pid), ppid: Number(ppid), stat: stat ?? "" }));
  if (procs.some((p) => /^[TtZ]/.test(p.stat))) return false;
  const others = procs.filter((p) => p.pid !== initPid);
  const keepers = others.filter((p) => p.ppid === initPid);
  if (keepers.length !== 1) return false;
  const keeper = keepers[0]!;
  const rest = others.filter((p) => p !== keeper);
  return rest.length <= 1 && rest.every((p) => p.ppid === keeper.pid);
}

/** "Container … is not running": the engine refuses a kill in a stopped container (409). */
function isNotRunning(err: unknown): boolean {
  return /is not running/i.test(errorText(err));
}

function execError(err: unknown, containerId: string): SandboxError {
  if (isNotFound(err)) {
    return new SandboxError("sandbox_gone", `sandbox container ${containerId.slice(0, 12)} no longer exists`, {
      cause: err,
    });
  }
  return new SandboxError("exec_failed", `exec in sandbox failed: ${errorText(err)}`, { cause: err });
}

/**
 * What a sandbox is allowed to do. The default ("core") profile is the hardened one; a deployment
 * may loosen single fields, and `resolveProfile` refuses the ones that would silently undo the
 * isolation (a root user, non-positive limits).
 */
import type { ContainerCreateOptions } from "dockerode";
import { SandboxError } from "./sandbox-errors";

export const WORKSPACE = "/workspace";

export interface SandboxProfile {
  name: string;
  /** "uid:gid", numeric, never 0. The workspace tmpfs is owned by it. */
  user: string;
  memoryBytes: number;
  /** 1e9 = one CPU. */
  nanoCpus: number;
  pidsLimit: number;
  /** Size of the /workspace tmpfs; its pages count against memoryBytes. */
  workspaceBytes: number;
  tmpBytes: number;
  /**
   * Size of /dev/shm, the private IPC namespace's tmpfs (Docker mounts it noexec,nosuid,nodev):
   * writable, so it is a third scratch space, and Docker's default is 64 MiB.
   */
  shmBytes: number;
  readonlyRootfs: boolean;
  /** false: the sandbox's network is `Internal` and its bridge holds no host address. */
  egress: boolean;
  env: Record<string, string>;
}

export const CORE_PROFILE: SandboxProfile = {
  name: "core",
  user: "65534:65534",
  memoryBytes: 512 * 1024 * 1024,
  nanoCpus: 1_000_000_000,
  pidsLimit: 256,
  workspaceBytes: 256 * 1024 * 1024,
  tmpBytes: 64 * 1024 * 1024,
  // Enough for POSIX semaphores and small shared buffers (Python multiprocessing); a tool that
  // needs more writes to /workspace.
  shmBytes: 8 * 1024 * 1024,
  readonlyRootfs: true,
  egress: false,
  env: {},
};

export interface ResolvedProfile extends SandboxProfile {
  uid: number;
  gid: number;
}

export function resolveProfile(overrides: Partial<SandboxProfile> = {}): ResolvedProfile {
  const p: SandboxProfile = { ...CORE_PROFILE, ...overrides, env: { ...CORE_PROFILE.env, ...overrides.env } };
  const m = /^(\d+):(\d+)$/.exec(p.user);
  const problems: string[] = [];
  if (!m) problems.push(`user must be numeric "uid:gid", got "${p.user}"`);
  else if (Number(m[1]) === 0 || Number(m[2]) === 0) problems.push("user must not be root (uid/gid 0)");
  for (const k of ["memoryBytes", "nanoCpus", "pidsLimit", "workspaceBytes", "tmpBytes", "shmBytes"] as const) {
    if (!Number.isSafeInteger(p[k]) || p[k] <= 0) problems.push(`${k} must be a positive integer, got ${p[k]}`);
  }
  if (problems.length)
    throw new SandboxError("invalid_config", `invalid sandbox profile "${p.name}": ${problems.join("; ")}`);
  return { ...p, uid: Number(m![1]), gid: Number(m![2]) };
}

/**
 * The sandbox's main process, the only child of tini (PID 1). On `KEEPER_SIGNAL`, which the host
 * sends through the engine (`POST /containers/{id}/kill?signal=…`; tini forwards it), it SIGKILLs
 * every other process of the sandbox user with kill(-1). `kill` is a shell builtin, so this needs
 * no fork and works when a command has filled the pids limit; kill(-1) reaches processes that
 * dropped their environment, changed session or double-forked; the kernel spares only PID 1 and
 * the caller. It idles in `wait` on a sleep child, which a trapped signal interrupts at once;
 * the loop starts a new sleeper when that one is killed (by the keeper or by a command), so a
 * command that kills every process it can no longer stops the container as killing the sleeper
 * did. It can still be stopped or killed itself (same user): the host checks the result and
 * restarts the container when the keeper did not do its job (exec.ts, `killAll`).
 */
export const KEEPER_SIGNAL = "SIGUSR1";
export const KEEPER_NAME = "ear-keeper";
const KEEPER_SCRIPT =
  "trap 'kill -KILL -1 2>/dev/null; kill -KILL -1 2>/dev/null' USR1; while :; do sleep 2147483647 & wait; done";

export function containerSpec(args: {
  profile: ResolvedProfile;
  image: string;
  name: string;
  networkName: string;
  labels: Record<string, string>;
  stopGraceS: number;
}): ContainerCreateOptions {
  const { profile: p } = args;
  const env = { HOME: WORKSPACE, PATH: "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", LANG: "C.UTF-8", ...p.env };
  return {
    name: args.name,
    Image: args.image,
    // tini (Init) is PID 1 and forwards SIGTERM to the keeper, a shell without a TERM trap, which
    // dies at once: the 2 s stop grace is not spent on every delete (measured: ~2 s per delete
    // when PID 1 ignores SIGTERM).
    Cmd: ["/bin/sh", "-c", KEEPER_SCRIPT, KEEPER_NAME],
    Entrypoint: [],
    User: p.user,
    WorkingDir: WORKSPACE,
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    Labels: args.labels,
    StopTimeout: args.stopGraceS,
    HostConfig: {
      NetworkMode: args.networkName,
      Init: true,
      Memory: p.memoryBytes,
      MemorySwap: p.memoryBytes, // no swap on top of the limit
      NanoCpus: p.nanoCpus,
      PidsLimit: p.pidsLimit,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      ReadonlyRootfs: p.readonlyRootfs,
      Tmpfs: {
        [WORKSPACE]: `rw,exec,nosuid,nodev,size=${p.workspaceBytes},uid=${p.uid},gid=${p.gid},mode=0755`,
        "/tmp": `rw,noexec,nosuid,nodev,size=${p.tmpBytes},mode=1777`,
      },
      IpcMode: "private",
      ShmSize: p.shmBytes,
      // Under host memory pressure the kernel should pick a sandbox, not the host daemon.
      OomScoreAdj: 500,
      RestartPolicy: { Name: "no" },
      LogConfig: { Type: "none", Config: {} },
    },
  };
}

/**
 * The sandbox provisioner: one hardened container on its own internal network per run, created
 * on first use (`ensure`, called by every tool), removed at the run's end (`destroy`) or, after a
 * crash, by `removeOrphans` at host start. Docker is the only record of what exists: containers
 * and networks carry host and run labels, and every delete finds its targets by label.
 */
import { createHash } from "node:crypto";
import type Docker from "dockerode";
import { type Logger, silentLogger } from "../log";
import { connectDocker, errorText, isGoneOrGoing, isNotFound } from "./docker";
import { type RawExecResult, runExec } from "./exec";
import * as files from "./files";
import { createKeyedLock, createSemaphore, type KeyedLock } from "./keyed-lock";
import { createNetworkPool } from "./network-pool";
import { containerSpec, type ResolvedProfile, resolveProfile, type SandboxProfile } from "./profile";
import { SandboxError } from "./sandbox-errors";

export const LABEL_SANDBOX = "ear.sandbox";
export const LABEL_HOST = "ear.sandbox.host";
export const LABEL_RUN = "ear.sandbox.run";

export interface SandboxManagerOptions {
  docker?: Docker;
  hostId: string;
  image: string;
  profile?: Partial<SandboxProfile>;
  /** Dedicated address pool; deployers must check it clashes with nothing on the host or VPN. */
  pool?: string;
  subnetPrefix?: number;
  deleteConcurrency?: number;
  /**
   * Sandbox creations (leftover check, network, container create and start) in flight at once;
   * the rest wait their turn in arrival order (`ensure`'s `onQueued`). The engine starts
   * containers about one at a time anyway (docs/sandboxes.md), so more in flight only adds
   * contention: 100 at once pushed this 2-core machine's load average to 42 and stalled the
   * hosts' own loops past their quota leases (docs/capacity.md).
   */
  createConcurrency?: number;
  stopGraceS?: number;
  deleteTimeoutMs?: number;
  /** Default timeout of file operations (shell commands bring their own). */
  fileOpTimeoutMs?: number;
  logger?: Logger;
  /** Replaceable only so a test can show what the per-run lock prevents. */
  lock?: KeyedLock;
  /** Observations for the host's metrics (sandboxes_active, create and delete time). */
  observe?: {
    active(n: number): void;
    created(seconds: number, outcome: "ok" | "error"): void;
    deleted(seconds: number, outcome: "ok" | "error"): void;
  };
}

export interface Sandbox {
  runId: string;
  containerId: string;
  containerName: string;
  networkId: string;
  networkName: string;
  subnet: string;
  createdAt: Date;
  /** ms spent creating it (0 when adopted from an earlier process). */
  createMs: number;
}

export interface ExecRequest {
  /** A shell command line, run by /bin/sh -c, or an argv. */
  cmd: string | string[];
  timeoutMs?: number;
  /** Per stream; beyond it output is dropped and a truncation marker appended. */
  outputCapBytes?: number;
  signal?: AbortSignal;
  cwd?: string;
}

export interface ExecResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  stdoutBytes: number;
  stderrBytes: number;
  truncated: boolean;
  timedOut: boolean;
  cancelled: boolean;
  /** Ending the command took a container restart: every process and /workspace are gone. */
  sandboxRestarted: boolean;
  durationMs: number;
}

export interface EnsureOptions {
  /** Called once if the creation has to wait for a turn, with how many creations are queued ahead. */
  onQueued?: (ahead: number) => void;
  /** Leaving the creation queue (a cancelled run): `ensure` rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Creations in flight and queued right now (what the host's admission reads). */
export interface CreationLoad {
  creating: number;
  queued: number;
  /** The bound on `creating` (SandboxManagerOptions.createConcurrency). */
  concurrency: number;
}

export interface DestroyResult {
  containers: number;
  networks: number;
}

export interface SandboxManager {
  /** The run's sandbox, created on first call; concurrent and repeated calls get the same one. */
  ensure(runId: string, opts?: EnsureOptions): Promise<Sandbox>;
  /** Creations in flight and waiting. */
  creationLoad(): CreationLoad;
  exec(runId: string, req: ExecRequest): Promise<ExecResult>;
  readFile(
    runId: string,
    path: string,
    opts?: { maxBytes?: number; signal?: AbortSignal },
  ): Promise<files.ReadFileResult>;
  writeFile(
    runId: string,
    path: string,
    data: Uint8Array | string,
    opts?: { createParents?: boolean; signal?: AbortSignal },
  ): Promise<files.WriteFileResult>;
  listDir(
    runId: string,
    path?: string,
    opts?: { maxEntries?: number; signal?: AbortSignal },
  ): Promise<files.ListDirResult>;
  /**
   * A tar of the directory `dir` (an absolute path inside /workspace) of the run's existing
   * sandbox, made by `tar` in the sandbox and read raw from the exec's stdout (a bind of the
   * workspace's tmpfs is not reachable through the Engine's archive API, which reads the image's
   * root filesystem). `null` when the directory does not exist; `tooLarge` when the archive passes
   * `maxBytes` (nothing is returned then).
   */
  packDir(
    runId: string,
    dir: string,
    maxBytes: number,
    opts?: { timeoutMs?: number; gzip?: boolean; paths?: readonly string[] },
  ): Promise<{ archive: Buffer | null; tooLarge: boolean }>;
  /**
   * Unpacks a gzipped tar (what `packDir(…, { gzip: true })` made) into `dir` of the run's
   * sandbox, by `tar` in the sandbox reading it from the exec's stdin. `remove`: paths (relative
   * to `dir`) removed first, recursively; an empty `archive` then unpacks nothing.
   */
  unpackDir(
    runId: string,
    dir: string,
    archive: Uint8Array,
    opts?: { timeoutMs?: number; remove?: readonly string[] },
  ): Promise<void>;
  /**
   * The entries under `dir` of the run's sandbox (`find` + busybox `stat`, in the sandbox), one
   * `%f|%i|%s|%y|%z|%n` line each (raw mode in hex, inode, size, mtime and ctime to the
   * nanosecond, `./`-relative name), after a first line holding the ctime of a marker touched
   * just before the walk (the filesystem clock's "now"). `null` when the directory does not
   * exist; `tooLarge` when the listing passes `maxBytes`.
   */
  listTree(
    runId: string,
    dir: string,
    maxBytes: number,
    opts?: { timeoutMs?: number },
  ): Promise<{ listing: string | null; tooLarge: boolean }>;
  /**
   * One exec for a workspace snapshot step: `listTree`'s listing of `dir`, then the gzipped tar
   * of it, whole (`mode` "full") or only the entries whose ctime is at or after `since` (a
   * previous listing's marker: "diff", none descended), in the order of the listing. `cut`: a
   * chain due to be cut, so anything selected makes the archive whole and an empty selection
   * packs nothing ("none"). A selection whose names pass `maxArgBytes` is packed whole. `listing`
   * is null when it passes `maxListingBytes` (the archive is then whole). `null` when the
   * directory does not exist; `tooLarge` when the output passes `maxListingBytes + maxArchiveBytes`.
   */
  snapshotTree(
    runId: string,
    dir: string,
    opts: {
      since: string | null;
      cut: boolean;
      maxListingBytes: number;
      maxArchiveBytes: number;
      maxArgBytes: number;
      timeoutMs?: number;
    },
  ): Promise<TreeSnapshot | null>;
  /** Removes the run's container and network; idempotent (nothing to remove is success). */
  destroy(runId: string, host?: string): Promise<DestroyResult>;
  /**
   * Removes this host's labelled containers/networks whose run is not in `liveRunIds`; `runs` are
   * those removed (a run whose removal failed is logged and left for the janitor).
   */
  removeOrphans(liveRunIds: ReadonlySet<string>): Promise<DestroyResult & { runs: string[] }>;
  /**
   * Every labelled sandbox on this engine, whichever host made it, so a live host can remove
   * what a host that never came back left behind (see `removeFinished`).
   */
  listAll(): Promise<Array<{ host: string; run: string }>>;
  /**
   * Removes sandboxes of any host on this engine whose run `isFinished` confirms is over (the
   * caller asks Postgres). Runs it cannot confirm — unknown ids, another deployment's — stay.
   * One run's failed removal does not hide the others': `runs` are the runs whose sandboxes are
   * gone, `failed` the rest with their errors (their objects may stay for the next pass, or be
   * gone all the same when another host removed them at the same moment).
   */
  removeFinished(
    isFinished: (runIds: string[]) => Promise<ReadonlySet<string>>,
  ): Promise<{ runs: string[]; failed: Array<{ run: string; error: unknown }> }>;
  active(): Sandbox[];
  readonly profile: ResolvedProfile;
}

export const DEFAULT_POOL = "10.253.240.0/20";
export const DEFAULT_CREATE_CONCURRENCY = 2;
export const DEFAULT_OUTPUT_CAP_BYTES = 32 * 1024;
export const DEFAULT_EXEC_TIMEOUT_MS = 60_000;
export const DEFAULT_READ_MAX_BYTES = 1024 * 1024;
export const MAX_WRITE_BYTES = 16 * 1024 * 1024;

export function createSandboxManager(opts: SandboxManagerOptions): SandboxManager {
  const docker = opts.docker ?? connectDocker();
  const profile = resolveProfile(opts.profile);
  const log = opts.logger ?? silentLogger;
  const lock = opts.lock ?? createKeyedLock();
  const deletions = createSemaphore(opts.deleteConcurrency ?? 32);
  const createConcurrency = opts.createConcurrency ?? DEFAULT_CREATE_CONCURRENCY;
  const creations = createSemaphore(createConcurrency);
  const stopGraceS = opts.stopGraceS ?? 2;
  const deleteTimeoutMs = opts.deleteTimeoutMs ?? 120_000;
  const fileOpTimeoutMs = opts.fileOpTimeoutMs ?? 30_000;
  const pool = createNetworkPool({
    docker,
    pool: opts.pool ?? DEFAULT_POOL,
    subnetPrefix: opts.subnetPrefix ?? 28,
  });
  const sandboxes = new Map<string, Sandbox>();

  const labelsFor = (runId: string) => ({ [LABEL_SANDBOX]: "1", [LABEL_HOST]: opts.hostId, [LABEL_RUN]: runId });
  const runFilter = (runId: string, host = opts.hostId) =>
    JSON.stringify({ label: [`${LABEL_HOST}=${host}`, `${LABEL_RUN}=${runId}`] });
  // Docker names allow [a-zA-Z0-9_.-]; run ids may not, and may be long. Labels carry the real ids.
  const nameFor = (runId: string) =>
    `ear-sb-${createHash("sha256").update(`${opts.hostId}\0${runId}`).digest("hex").slice(0, 20)}`;

  async function create(runId: string): Promise<Sandbox> {
    const started = performance.now();
    const name = nameFor(runId);
    const labels = labelsFor(runId);
    const net = await pool.create({ runId, name, labels, internal: !profile.egress });
    let containerId: string | null = null;
    try {
      const container = await docker.createContainer(
        containerSpec({ profile, image: opts.image, name, networkName: name, labels, stopGraceS }),
      );
      containerId = container.id;
      await container.start();
    } catch (err) {
      await removeByLabel(runId).catch((cleanupErr) =>
        log.warn("sandbox create cleanup failed", { run_id: runId, error: errorText(cleanupErr) }),
      );
      opts.observe?.created((performance.now() - started) / 1000, "error");
      const hint = isNotFound(err) ? ` (image ${opts.image} missing? build it with \`npm run sandbox:image\`)` : "";
      throw new SandboxError("create_failed", `creating sandbox for run ${runId} failed: ${errorText(err)}${hint}`, {
        cause: err,
        runId,
      });
    }
    const createMs = Math.round(performance.now() - started);
    opts.observe?.created(createMs / 1000, "ok");
    log.info("sandbox created", { run_id: runId, container: name, subnet: net.subnet, ms: createMs });
    return {
      runId,
      containerId,
      containerName: name,
      networkId: net.id,
      networkName: name,
      subnet: net.subnet,
      createdAt: new Date(),
      createMs,
    };
  }

  /** A running container left by an earlier process of this host for the same run is reused. */
  async function adopt(runId: string): Promise<Sandbox | null> {
    const [containers, networks] = await Promise.all([
      docker.listContainers({ all: true, filters: runFilter(runId) }),
      docker.listNetworks({ filters: runFilter(runId) }),
    ]);
    if (containers.length === 0 && networks.length === 0) return null;
    const c = containers[0];
    const n = networks[0];
    if (containers.length === 1 && networks.length === 1 && c && n && c.State === "running") {
      return {
        runId,
        containerId: c.Id,
        containerName: (c.Names[0] ?? "").replace(/^\//, ""),
        networkId: n.Id,
        networkName: n.Name,
        subnet: n.IPAM?.Config?.[0]?.Subnet ?? "",
        createdAt: new Date(c.Created * 1000),
        createMs: 0,
      };
    }
    await removeByLabel(runId);
    return null;
  }

  async function removeByLabel(runId: string, host = opts.hostId): Promise<DestroyResult> {
    const containers = await docker.listContainers({ all: true, filters: runFilter(runId, host) });
    await Promise.all(
      containers.map(async (info) => {
        const c = docker.getContainer(info.Id);
        if (info.State === "running") {
          await c.stop({ t: stopGraceS }).catch((err) => {
            if (!isGoneOrGoing(err)) throw err;
          });
        }
        await c.remove({ force: true, v: true }).catch((err) => {
          if (!isGoneOrGoing(err)) throw err;
        });
      }),
    );
    const networks = await docker.listNetworks({ filters: runFilter(runId, host) });
    await Promise.all(
      networks.map((n) =>
        docker
          .getNetwork(n.Id)
          .remove()
          .catch((err) => {
            if (!isNotFound(err)) throw err;
          }),
      ),
    );
    return { containers: containers.length, networks: networks.length };
  }

  /** `host`: whose labels to remove (default this host; the janitor names a dead host's). */
  function destroy(runId: string, host = opts.hostId): Promise<DestroyResult> {
    return lock.run(runId, () =>
      deletions.run(async () => {
        const started = performance.now();
        let timer: NodeJS.Timeout | undefined;
        const timeout = new Promise<never>((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new SandboxError("delete_timeout", `deleting sandbox of run ${runId} took over ${deleteTimeoutMs} ms`, {
                  runId,
                }),
              ),
            deleteTimeoutMs,
          );
        });
        try {
          const removed = await Promise.race([removeByLabel(runId, host), timeout]);
          if (host === opts.hostId && sandboxes.delete(runId)) opts.observe?.active(sandboxes.size);
          if (removed.containers || removed.networks) {
            log.info("sandbox deleted", {
              run_id: runId,
              ...(host === opts.hostId ? {} : { of_host: host }),
              ...removed,
            });
            opts.observe?.deleted((performance.now() - started) / 1000, "ok");
          }
          return removed;
        } catch (err) {
          opts.observe?.deleted((performance.now() - started) / 1000, "error");
          if (err instanceof SandboxError) throw err;
          throw new SandboxError("delete_failed", `deleting sandbox of run ${runId} failed: ${errorText(err)}`, {
            cause: err,
            runId,
          });
        } finally {
          clearTimeout(timer);
        }
      }),
    );
  }

  /** Every labelled sandbox on this engine, as (host, run) pairs. */
  async function listAll(): Promise<Array<{ host: string; run: string }>> {
    const all = JSON.stringify({ label: [`${LABEL_SANDBOX}=1`] });
    const [containers, networks] = await Promise.all([
      docker.listContainers({ all: true, filters: all }),
      docker.listNetworks({ filters: all }),
    ]);
    const seen = new Map<string, { host: string; run: string }>();
    for (const x of [...containers.map((c) => c.Labels), ...networks.map((n) => n.Labels)]) {
      const host = x?.[LABEL_HOST];
      const run = x?.[LABEL_RUN];
      if (host !== undefined && run !== undefined) seen.set(`${host}\0${run}`, { host, run });
    }
    return [...seen.values()];
  }

  function ensure(runId: string, o: EnsureOptions = {}): Promise<Sandbox> {
    return lock.run(runId, async () => {
      const known = sandboxes.get(runId);
      if (known) return known;
      const sb = await creations.run(async () => {
        let adopted: Sandbox | null;
        try {
          adopted = await adopt(runId);
        } catch (err) {
          throw new SandboxError("create_failed", `inspecting leftovers of run ${runId} failed: ${errorText(err)}`, {
            cause: err,
            runId,
          });
        }
        return adopted ?? (await create(runId));
      }, o);
      sandboxes.set(runId, sb);
      opts.observe?.active(sandboxes.size);
      return sb;
    });
  }

  async function fileCtx(runId: string, signal?: AbortSignal): Promise<files.FileOpContext> {
    const sb = await ensure(runId);
    return { docker, containerId: sb.containerId, user: profile.user, runId, timeoutMs: fileOpTimeoutMs, signal };
  }

  return {
    profile,
    ensure,
    creationLoad: () => ({ creating: creations.active, queued: creations.waiting, concurrency: createConcurrency }),
    destroy,
    active: () => [...sandboxes.values()],

    async exec(runId, req) {
      const sb = await ensure(runId);
      const cap = req.outputCapBytes ?? DEFAULT_OUTPUT_CAP_BYTES;
      const r = await runExec(docker, sb.containerId, {
        argv: typeof req.cmd === "string" ? ["/bin/sh", "-c", req.cmd] : req.cmd,
        timeoutMs: req.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
        capBytes: cap,
        signal: req.signal,
        cwd: req.cwd === undefined ? undefined : files.workspacePath(req.cwd, runId),
        user: profile.user,
      });
      return toExecResult(r);
    },

    async packDir(runId, dir, maxBytes, o = {}) {
      const sb = await ensure(runId);
      const r = await runExec(docker, sb.containerId, {
        // Exit 3: no such directory (not an error: the run left nothing there).
        argv: [
          "/bin/sh",
          "-c",
          // gzip is a stage of its own in the sandbox (its CPU, its cgroup), never on the host's loop.
          // `paths`: only those entries (busybox tar has no -T), each its own argument, none descended.
          `set -o pipefail; [ -d "$1" ] || exit 3; cd "$1" && shift && ${o.paths ? 'tar -cf - --no-recursion "$@"' : "tar -cf - ."}${o.gzip ? " | gzip -c" : ""}`,
          "sh",
          files.workspacePath(dir, runId),
          ...(o.paths ?? []),
        ],
        timeoutMs: o.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
        capBytes: maxBytes,
        user: profile.user,
      });
      if (r.exitCode === 3) return { archive: null, tooLarge: false };
      if (r.stdoutBytes > maxBytes) return { archive: null, tooLarge: true };
      if (r.exitCode !== 0) throw execFailed(runId, `tar of ${dir}`, r);
      return { archive: r.stdout, tooLarge: false };
    },

    async unpackDir(runId, dir, archive, o = {}) {
      const sb = await ensure(runId);
      const r = await runExec(docker, sb.containerId, {
        argv: [
          "/bin/sh",
          "-c",
          // $2: whether there is an archive to unpack (a diff may only delete); the rest: paths to remove first.
          'set -o pipefail; mkdir -p "$1" && cd "$1" && x="$2" && shift 2 && { [ $# -eq 0 ] || rm -rf "$@"; } && { [ "$x" = 0 ] || gzip -dc | tar -xf -; }',
          "sh",
          files.workspacePath(dir, runId),
          archive.byteLength > 0 ? "1" : "0",
          ...(o.remove ?? []),
        ],
        stdin: archive,
        timeoutMs: o.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
        capBytes: DEFAULT_OUTPUT_CAP_BYTES,
        user: profile.user,
      });
      if (r.exitCode !== 0) throw execFailed(runId, `untar into ${dir}`, r);
    },

    async listTree(runId, dir, maxBytes, o = {}) {
      const sb = await ensure(runId);
      const r = await runExec(docker, sb.containerId, {
        argv: [
          "/bin/sh",
          "-c",
          // The marker is on /tmp, a tmpfs like /workspace: both stamp times from the kernel's coarse
          // clock (a few ms a tick), so "changed at or after the marker" is comparable.
          '[ -d "$1" ] || exit 3; m=/tmp/.ear-tree-mark; touch "$m" && stat -c %z "$m" && cd "$1" && find . -mindepth 1 -exec stat -c "%f|%i|%s|%y|%z|%n" {} +',
          "sh",
          files.workspacePath(dir, runId),
        ],
        timeoutMs: o.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
        capBytes: maxBytes,
        user: profile.user,
      });
      if (r.exitCode === 3) return { listing: null, tooLarge: false };
      if (r.stdoutBytes > maxBytes) return { listing: null, tooLarge: true };
      if (r.exitCode !== 0) throw execFailed(runId, `listing ${dir}`, r);
      return { listing: r.stdout.toString("utf8"), tooLarge: false };
    },

    async snapshotTree(runId, dir, o) {
      const sb = await ensure(runId);
      const r = await runExec(docker, sb.containerId, {
        argv: [
          "/bin/sh",
          "-c",
          SNAPSHOT_SCRIPT,
          "sh",
          files.workspacePath(dir, runId),
          o.since ?? "",
          o.cut ? "1" : "0",
          String(o.maxListingBytes),
          String(o.maxArgBytes),
        ],
        timeoutMs: o.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
        capBytes: o.maxListingBytes + o.maxArchiveBytes + 64,
        user: profile.user,
      });
      if (r.exitCode === 3) return null;
      if (r.stdoutBytes > o.maxListingBytes + o.maxArchiveBytes + 64) {
        return { listing: null, mode: "full", selected: 0, archive: null, tooLarge: true };
      }
      if (r.exitCode !== 0) throw execFailed(runId, `snapshot of ${dir}`, r);
      const nl = r.stdout.indexOf(0x0a);
      const head = /^(\d+) (full|diff|none) (\d+)$/.exec(r.stdout.subarray(0, nl === -1 ? 0 : nl).toString("latin1"));
      if (!head) throw execFailed(runId, `snapshot of ${dir} (no header)`, r);
      const listingBytes = Number(head[1]);
      const mode = head[2] as TreeSnapshot["mode"];
      const rest = r.stdout.subarray(nl + 1);
      const archive = rest.subarray(listingBytes);
      return {
        listing: listingBytes > 0 ? rest.subarray(0, listingBytes).toString("utf8") : null,
        mode,
        selected: Number(head[3]),
        archive: mode === "none" || archive.byteLength === 0 ? null : Buffer.from(archive),
        tooLarge: false,
      };
    },

    async readFile(runId, path, o = {}) {
      return files.readFile(await fileCtx(runId, o.signal), path, o.maxBytes ?? DEFAULT_READ_MAX_BYTES);
    },

    async writeFile(runId, path, data, o = {}) {
      const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
      if (bytes.byteLength > MAX_WRITE_BYTES) {
        throw new SandboxError("too_large", `write of ${bytes.byteLength} bytes exceeds ${MAX_WRITE_BYTES}`, { runId });
      }
      return files.writeFile(await fileCtx(runId, o.signal), path, bytes, o.createParents ?? true);
    },

    async listDir(runId, path = ".", o = {}) {
      return files.listDir(await fileCtx(runId, o.signal), path, o.maxEntries ?? 1000);
    },

    async removeOrphans(liveRunIds) {
      const runs = new Set(
        (await listAll()).filter((x) => x.host === opts.hostId && !liveRunIds.has(x.run)).map((x) => x.run),
      );
      // Settled like removeFinished: the runs removed are reported even if another's removal
      // failed (the caller clears their fences); a failed one stays for the janitor.
      const settled = await Promise.allSettled([...runs].map(async (run) => ({ run, removed: await destroy(run) })));
      const results: DestroyResult[] = [];
      const removedRuns: string[] = [];
      for (const r of settled) {
        if (r.status === "fulfilled") {
          results.push(r.value.removed);
          removedRuns.push(r.value.run);
        } else log.warn("sandbox orphan removal failed", { error: errorText(r.reason) });
      }
      const total = results.reduce(
        (a, r) => ({ containers: a.containers + r.containers, networks: a.networks + r.networks }),
        {
          containers: 0,
          networks: 0,
        },
      );
      if (removedRuns.length) log.info("sandbox orphans removed", { runs: removedRuns.length, ...total });
      return { ...total, runs: removedRuns };
    },

    listAll,

    async removeFinished(isFinished) {
      const all = await listAll();
      if (all.length === 0) return { runs: [], failed: [] };
      const finished = await isFinished([...new Set(all.map((x) => x.run))]);
      const doomed = all.filter((x) => finished.has(x.run));
      // Settled, not Promise.all: a run whose removal succeeded must be reported even when
      // another's failed, or its fence is never cleared (its objects are gone, so no later
      // listing finds it again).
      const results = await Promise.allSettled(doomed.map((x) => destroy(x.run, x.host)));
      const failed: Array<{ run: string; error: unknown }> = [];
      results.forEach((r, i) => {
        const run = doomed[i]?.run;
        if (r.status === "rejected" && run !== undefined) failed.push({ run, error: r.reason });
      });
      const runs = [...new Set(doomed.map((x) => x.run))].filter((run) => !failed.some((f) => f.run === run));
      if (runs.length) log.info("finished runs' sandboxes removed", { runs: runs.length, failed: failed.length });
      return { runs, failed };
    },
  };
}

/** What `snapshotTree` printed: the listing, what it packed, and the archive. */
export interface TreeSnapshot {
  listing: string | null;
  mode: "full" | "diff" | "none";
  /** Entries the diff selection held (0 unless `since` was given). */
  selected: number;
  /** The gzipped tar; null when nothing was packed. */
  archive: Buffer | null;
  tooLarge: boolean;
}

/**
 * `snapshotTree`'s script ($1 dir, $2 since, $3 cut, $4 max listing bytes, $5 max selection
 * argument bytes). The listing goes to a file on /tmp first (a tmpfs, like /workspace: the
 * marker's ctime and the entries' come from the same coarse clock, see listTree) so its size can
 * lead the output: `<listing bytes> <mode> <selected>\n`, the listing, then the archive. awk
 * selects by the listing's ctime field (the fifth `|`-field; names may hold `|` but come last)
 * and quotes each name for `eval` (busybox tar has no -T, and names are arguments).
 */
const SNAPSHOT_SCRIPT = `set -o pipefail
d="$1"; since="$2"; cut="$3"; maxl="$4"; maxa="$5"
[ -d "$d" ] || exit 3
m=/tmp/.ear-tree-mark; l=/tmp/.ear-tree-list
trap 'rm -f "$l"' EXIT
touch "$m" && stat -c %z "$m" > "$l" && cd "$d" && find . -mindepth 1 -exec stat -c "%f|%i|%s|%y|%z|%n" {} + >> "$l" || exit 4
lb=$(( $(wc -c < "$l") ))
mode=full; n=0; sel=""
if [ "$lb" -gt "$maxl" ]; then lb=0
elif [ -n "$since" ]; then
  sel=$(awk -F'|' -v since="$since" -v maxa="$maxa" '
    NR > 1 && NF >= 6 && $5 >= since {
      name = substr($0, length($1) + length($2) + length($3) + length($4) + length($5) + 6)
      bytes += length(name) + 1; n++; q = ""
      while ((i = index(name, "\\047")) > 0) { q = q substr(name, 1, i - 1) "\\047\\134\\047\\047"; name = substr(name, i + 1) }
      args = args " \\047" q name "\\047"
    }
    END { print (bytes > maxa ? -1 : n + 0); print "set --" args }' "$l") || exit 5
  n=\${sel%%[!0-9-]*}
  if [ "$n" -lt 0 ]; then mode=full
  elif [ "$cut" = 1 ]; then if [ "$n" -gt 0 ]; then mode=full; else mode=none; fi
  else mode=diff; fi
fi
printf '%s %s %s\\n' "$lb" "$mode" "$n"
[ "$lb" -eq 0 ] || cat "$l"
case $mode in
  full) tar -cf - . | gzip -c ;;
  diff) if [ "$n" -gt 0 ]; then eval "\${sel#*
}" && tar -cf - --no-recursion "$@" | gzip -c; fi ;;
esac`;

/** A workspace command (tar, untar, the listing) that exited non-zero, with the start of its stderr. */
function execFailed(runId: string, what: string, r: RawExecResult): SandboxError {
  return new SandboxError("exec_failed", `${what} exited ${r.exitCode}: ${r.stderr.toString().slice(0, 200)}`, {
    runId,
  });
}

function marker(n: number, stream: string): string {
  return `\n…[truncated: ${n} more bytes of ${stream}]`;
}

export function toExecResult(r: RawExecResult): ExecResult {
  const decode = (b: Buffer) => new TextDecoder("utf-8", { fatal: false }).decode(b);
  const cutOut = r.stdoutBytes - r.stdout.length;
  const cutErr = r.stderrBytes - r.stderr.length;
  return {
    exitCode: r.exitCode,
    stdout: decode(r.stdout) + (cutOut > 0 ? marker(cutOut, "stdout") : ""),
    stderr: decode(r.stderr) + (cutErr > 0 ? marker(cutErr, "stderr") : ""),
    stdoutBytes: r.stdoutBytes,
    stderrBytes: r.stderrBytes,
    truncated: cutOut > 0 || cutErr > 0,
    timedOut: r.timedOut,
    cancelled: r.cancelled,
    sandboxRestarted: r.sandboxRestarted,
    durationMs: r.durationMs,
  };
}

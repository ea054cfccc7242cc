/**
 * `npm run sandbox:image`: builds the small local sandbox image `ear-sandbox:local` with no
 * registry — a root filesystem holding Debian's static busybox (every applet as a symlink),
 * /workspace and /tmp, and a `nobody` (65534) user — imported straight into the engine.
 * Tests and offline dev use it; real deployments use the image documented in docs/sandboxes.md.
 * ensureSandboxImage rebuilds an image whose root filesystem is not this recipe's (the layer's
 * digest is the tarball's SHA-256), so a fix here reaches an image built before it.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { Readable } from "node:stream";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { connectDocker, type Docker } from "../../sandbox-host/sandbox/docker";
import { type TarEntry, tarball } from "./rootfs-tar";

export const LOCAL_SANDBOX_IMAGE = "ear-sandbox:local";
const NOBODY = 65534;

export interface BuildOptions {
  docker?: Docker;
  /** repo:tag to import as. */
  image?: string;
  /** A statically linked busybox (Debian: `apt-get install busybox-static`). */
  busyboxPath?: string;
}

/**
 * Debian's busybox-static 1.35 (fixed in 1.36.1-5) is built without FEATURE_WGET_TIMEOUT, yet
 * its wget still declares `-T` as an integer option ("T:+") whose destination is then NULL:
 * `wget -T 5 http://…` died with "Segmentation fault" (exit 139) before any network error.
 * A wrapper script cannot help: this busybox's sh runs an applet by name before any PATH lookup.
 * So the image's copy gets the option table's `T:+t:n::` rewritten as `T:t:n:::` (same length;
 * every option keeps its bit and its argument slot): `-T SECS` becomes a string option with no
 * destination, which getopt32 skips, i.e. it is accepted and ignored; the extra `:` is a no-op
 * for getopt32 and glibc. Only a binary that crashes so (checked by running it) is patched: one
 * built with the timeout uses the same string with a real destination.
 */
const WGET_OPTS = Buffer.from("T:+t:n::");
const WGET_OPTS_PATCHED = Buffer.from("T:t:n:::");

/** Whether this busybox's `wget -T` is the NULL write (SIGSEGV), tried against a closed local port. */
async function wgetTimeoutCrashes(busyboxPath: string): Promise<boolean> {
  try {
    await promisify(execFile)(busyboxPath, ["wget", "-q", "-T", "1", "-O", "/dev/null", "http://127.0.0.1:9/"]);
    return false;
  } catch (err) {
    return (err as { signal?: string }).signal === "SIGSEGV";
  }
}

export function patchWgetTimeout(busybox: Buffer): Buffer {
  const at = busybox.indexOf(WGET_OPTS);
  if (at < 0 || busybox.indexOf(WGET_OPTS, at + 1) >= 0) {
    throw new Error("busybox's wget crashes on -T, but its option table is not the one this build knows how to mend");
  }
  const out = Buffer.from(busybox);
  WGET_OPTS_PATCHED.copy(out, at);
  return out;
}

export async function rootfsEntries(busyboxPath: string): Promise<TarEntry[]> {
  const [original, list, crashes] = await Promise.all([
    readFile(busyboxPath),
    promisify(execFile)(busyboxPath, ["--list"]).then((r) => r.stdout),
    wgetTimeoutCrashes(busyboxPath),
  ]);
  const busybox = crashes ? patchWgetTimeout(original) : original;
  const applets = list
    .split("\n")
    .map((s) => s.trim())
    .filter((s) => /^[\w.[-]+$/.test(s) && s !== "busybox");
  const dir = (path: string, mode = 0o755, uid = 0): TarEntry => ({ type: "dir", path, mode, uid, gid: uid });
  const text = (path: string, body: string): TarEntry => ({
    type: "file",
    path,
    mode: 0o644,
    data: Buffer.from(body),
  });
  return [
    dir("bin"),
    { type: "file", path: "bin/busybox", mode: 0o755, data: busybox },
    ...applets.map((a): TarEntry => ({ type: "symlink", path: `bin/${a}`, target: "busybox" })),
    { type: "symlink", path: "sbin", target: "bin" },
    dir("usr"),
    { type: "symlink", path: "usr/bin", target: "../bin" },
    { type: "symlink", path: "usr/sbin", target: "../bin" },
    dir("etc"),
    text("etc/passwd", `root:x:0:0:root:/root:/bin/sh\nnobody:x:${NOBODY}:${NOBODY}:nobody:/workspace:/bin/sh\n`),
    text("etc/group", `root:x:0:\nnogroup:x:${NOBODY}:\n`),
    dir("root", 0o700),
    dir("tmp", 0o1777),
    dir("workspace", 0o755, NOBODY),
    dir("proc"),
    dir("sys"),
    dir("dev"),
  ];
}

/** Imports the rootfs as an image; returns its id. Idempotent: same input, same layer. */
export async function buildSandboxImage(opts: BuildOptions = {}): Promise<string> {
  return importRootfs(opts, await rootfsTar(opts));
}

/**
 * The image, built when it is missing or its root filesystem is not this recipe's (an image
 * from before a change here): its one layer's digest is the SHA-256 of the tarball it imported.
 */
export async function ensureSandboxImage(opts: BuildOptions = {}): Promise<string> {
  const docker = opts.docker ?? connectDocker();
  const tar = await rootfsTar(opts);
  const layer = `sha256:${createHash("sha256").update(tar).digest("hex")}`;
  const info = await docker
    .getImage(opts.image ?? LOCAL_SANDBOX_IMAGE)
    .inspect()
    .catch(() => null);
  if (info?.RootFS?.Layers?.length === 1 && info.RootFS.Layers[0] === layer) return info.Id;
  return importRootfs({ ...opts, docker }, tar);
}

async function rootfsTar(opts: BuildOptions): Promise<Buffer> {
  return tarball(await rootfsEntries(opts.busyboxPath ?? "/bin/busybox"));
}

async function importRootfs(opts: BuildOptions, tar: Buffer): Promise<string> {
  const docker = opts.docker ?? connectDocker();
  const image = opts.image ?? LOCAL_SANDBOX_IMAGE;
  const [repo, tag = "latest"] = image.split(/:(?=[^:/]+$)/);
  const progress = await docker.importImage(Readable.from([tar]), {
    repo,
    tag,
    changes: ['CMD ["/bin/sh"]', "WORKDIR /workspace", `USER ${NOBODY}:${NOBODY}`, "ENV PATH=/bin"],
  });
  await new Promise<void>((resolve, reject) =>
    docker.modem.followProgress(progress, (err: Error | null, out: Array<{ error?: string }>) => {
      const failed = out?.find((o) => o.error);
      if (err || failed) reject(err ?? new Error(failed?.error));
      else resolve();
    }),
  );
  const info = await docker.getImage(image).inspect();
  return info.Id;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const image = process.argv[2] ?? LOCAL_SANDBOX_IMAGE;
  const id = await buildSandboxImage({ image });
  console.log(`built ${image} (${id})`);
}

/**
 * `npm run sandbox:image`: builds the small local sandbox image `ear-sandbox:local` with no
 * registry — a root filesystem holding Debian's static busybox (every applet as a symlink),
 * /workspace and /tmp, and a `nobody` (65534) user — imported straight into the engine.
 * Tests and offline dev use it; real deployments use the image documented in docs/sandboxes.md.
 */
import { execFile } from "node:child_process";
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

export async function rootfsEntries(busyboxPath: string): Promise<TarEntry[]> {
  const [busybox, list] = await Promise.all([
    readFile(busyboxPath),
    promisify(execFile)(busyboxPath, ["--list"]).then((r) => r.stdout),
  ]);
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
  const docker = opts.docker ?? connectDocker();
  const image = opts.image ?? LOCAL_SANDBOX_IMAGE;
  const [repo, tag = "latest"] = image.split(/:(?=[^:/]+$)/);
  const tar = tarball(await rootfsEntries(opts.busyboxPath ?? "/bin/busybox"));
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

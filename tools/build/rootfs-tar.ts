/**
 * A minimal ustar writer: enough to describe a root filesystem (directories, files, symlinks)
 * with explicit owners and modes, so the image build needs neither root nor a `tar` binary.
 */
export type TarEntry =
  | { type: "dir"; path: string; mode: number; uid?: number; gid?: number }
  | { type: "file"; path: string; mode: number; data: Buffer; uid?: number; gid?: number }
  | { type: "symlink"; path: string; target: string };

function octal(n: number, width: number): string {
  return `${n.toString(8).padStart(width - 1, "0")}\0`;
}

function header(e: TarEntry, size: number): Buffer {
  const h = Buffer.alloc(512, 0);
  const name = e.type === "dir" ? `${e.path}/` : e.path;
  if (Buffer.byteLength(name) > 100) throw new Error(`tar path too long: ${name}`);
  h.write(name, 0, 100, "utf8");
  h.write(octal(e.type === "symlink" ? 0o777 : e.mode, 8), 100, 8, "ascii");
  h.write(octal(e.type === "symlink" ? 0 : (e.uid ?? 0), 8), 108, 8, "ascii");
  h.write(octal(e.type === "symlink" ? 0 : (e.gid ?? 0), 8), 116, 8, "ascii");
  h.write(octal(size, 12), 124, 12, "ascii");
  h.write(octal(0, 12), 136, 12, "ascii"); // mtime 0: the same input gives the same layer
  h.write("        ", 148, 8, "ascii"); // checksum placeholder (spaces) while summing
  h.write(e.type === "dir" ? "5" : e.type === "symlink" ? "2" : "0", 156, 1, "ascii");
  if (e.type === "symlink") h.write(e.target, 157, 100, "utf8");
  h.write("ustar\u000000", 257, 8, "ascii");
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8, "ascii");
  return h;
}

export function tarball(entries: TarEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const data = e.type === "file" ? e.data : Buffer.alloc(0);
    parts.push(header(e, data.length), data);
    const pad = (512 - (data.length % 512)) % 512;
    if (pad) parts.push(Buffer.alloc(pad, 0));
  }
  parts.push(Buffer.alloc(1024, 0));
  return Buffer.concat(parts);
}

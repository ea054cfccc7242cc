/**
 * Reads the regular files of a tar archive (what `tar -cf -` in a sandbox writes: busybox's ustar
 * with GNU long-name records, or a POSIX pax `path`). Only what the artifacts need: regular files
 * and their bytes; directories, links and devices are skipped (a symlink to /etc is never followed,
 * it is not a file of the archive). The archive is in memory, bounded by the caller.
 */

export interface TarFile {
  /** As archived, without a leading `./`. */
  path: string;
  data: Uint8Array<ArrayBuffer>;
}

const BLOCK = 512;

function field(header: Buffer, at: number, length: number): string {
  const raw = header.subarray(at, at + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end === -1 ? length : end).toString("utf8");
}

function octal(header: Buffer, at: number, length: number): number {
  const text = field(header, at, length).trim();
  const n = text === "" ? 0 : Number.parseInt(text, 8);
  if (!Number.isFinite(n) || n < 0) throw new Error(`tar: bad number field "${text}"`);
  return n;
}

/** The `path` record of a pax extended header (`<len> path=<value>\n` records), if any. */
function paxPath(data: Buffer): string | null {
  let at = 0;
  while (at < data.length) {
    const space = data.indexOf(0x20, at);
    if (space === -1) break;
    const len = Number.parseInt(data.subarray(at, space).toString("ascii"), 10);
    if (!Number.isFinite(len) || len <= 0) break;
    const record = data.subarray(space + 1, at + len - 1).toString("utf8");
    if (record.startsWith("path=")) return record.slice(5);
    at += len;
  }
  return null;
}

export function readTarFiles(archive: Buffer): TarFile[] {
  const files: TarFile[] = [];
  let at = 0;
  let longName: string | null = null;
  while (at + BLOCK <= archive.length) {
    const header = archive.subarray(at, at + BLOCK);
    if (header.every((b) => b === 0)) break;
    const size = octal(header, 124, 12);
    const type = String.fromCharCode(header[156] ?? 0);
    const dataStart = at + BLOCK;
    if (dataStart + size > archive.length) throw new Error("tar: archive ends inside an entry");
    const data = archive.subarray(dataStart, dataStart + size);
    at = dataStart + Math.ceil(size / BLOCK) * BLOCK;
    if (type === "L") {
      longName = field(data, 0, data.length);
      continue;
    }
    if (type === "x") {
      longName = paxPath(data) ?? longName;
      continue;
    }
    const prefix = field(header, 345, 155);
    const name = longName ?? (prefix ? `${prefix}/${field(header, 0, 100)}` : field(header, 0, 100));
    longName = null;
    if (type !== "0" && type !== "\0") continue;
    files.push({ path: name.replace(/^(\.\/)+/, ""), data: new Uint8Array(data) });
  }
  return files;
}

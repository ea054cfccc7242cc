/**
 * Tests that need an external binary (redis-server, dockerd) skip with a clear message on a
 * developer's machine without it, but fail under CI=true, where a skip would hide a broken setup.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";

export async function hasBinary(name: string): Promise<boolean> {
  try {
    await promisify(execFile)("sh", ["-c", `command -v ${name}`]);
    return true;
  } catch {
    return false;
  }
}

/** Returns true when the suite can run; throws under CI when it cannot. */
export async function requireBinary(name: string, install: string): Promise<boolean> {
  if (await hasBinary(name)) return true;
  const msg = `${name} is not installed (${install}); the suites that need it are skipped`;
  if (process.env.CI === "true") throw new Error(`${msg} — but CI=true, so this is a failure`);
  console.warn(msg);
  return false;
}

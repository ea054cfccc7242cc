/**
 * The SDK's tarball as `npm run pack` makes it (tools/build/packages.ts builds dist/pkg, npm packs
 * it), into a test's own directory: what a team installs (docs/sdk.md).
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { buildPackages, PKG_OUT } from "../../tools/build/packages";

const exec = promisify(execFile);

/** Builds dist/pkg and packs it into `dir`: the tarball's path. */
export async function packSdk(dir: string): Promise<string> {
  await buildPackages();
  const { stdout } = await exec("npm", ["pack", PKG_OUT, "--pack-destination", dir, "--silent"]);
  return join(dir, stdout.trim().split("\n").at(-1) as string);
}

/**
 * A fresh `npm ci` is quiet, read from package-lock.json without installing anything:
 *
 * - Every package the lock installs admits the oldest Node package.json's `engines` admits (and
 *   the Node running this test): the kubernetes-models 5 family wanted Node ≥ 22 while engines
 *   says ≥ 20.19, and npm printed 26 EBADENGINE lines on Node 20.
 * - package.json's `allowScripts` (npm 11) decides every package with an install script, and
 *   names nothing else: an undecided one makes npm print its "not yet covered" list (it had 10).
 *   The entries are name-only: this lockfile has no `resolved` URLs, and npm matches a pinned
 *   `name@version` entry only against one, so a pinned entry would never match.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..", "..");
// semver is npm's own range parser (already installed by many of our dependencies).
const semver = createRequire(import.meta.url)("semver") as {
  satisfies(version: string, range: string): boolean;
  minVersion(range: string): { version: string } | null;
};

interface LockEntry {
  version?: string;
  engines?: { node?: string };
  hasInstallScript?: boolean;
  optional?: boolean;
}
const pkg = JSON.parse(readFileSync(resolve(ROOT, "package.json"), "utf8")) as {
  engines: { node: string };
  allowScripts?: Record<string, boolean>;
};
const lock = JSON.parse(readFileSync(resolve(ROOT, "package-lock.json"), "utf8")) as {
  packages: Record<string, LockEntry>;
};
const installed = Object.entries(lock.packages)
  .filter(([path]) => path !== "")
  .map(([path, entry]) => ({ name: path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length), entry }));

describe("a fresh npm ci", () => {
  it("installs nothing whose engines exclude a Node that package.json admits", () => {
    const oldest = semver.minVersion(pkg.engines.node)?.version as string;
    expect(oldest).toBe("20.19.0");
    for (const node of [oldest, process.versions.node]) {
      const refusing = installed
        .filter(({ entry }) => entry.engines?.node && !semver.satisfies(node, entry.engines.node))
        .map(({ name, entry }) => `${name}@${entry.version} wants node ${entry.engines?.node}`);
      expect(refusing, `on Node ${node}`).toEqual([]);
    }
  });

  it("has every install script allowed or denied in allowScripts, and no entry for anything else", () => {
    const policy = pkg.allowScripts ?? {};
    const withScripts = new Set(installed.filter(({ entry }) => entry.hasInstallScript).map(({ name }) => name));
    expect(
      [...withScripts].filter((name) => !(name in policy)),
      "undecided",
    ).toEqual([]);
    expect(
      Object.keys(policy).filter((key) => !withScripts.has(key)),
      "entries matching no package with an install script (or pinned)",
    ).toEqual([]);
  });
});

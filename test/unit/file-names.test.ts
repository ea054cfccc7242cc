/**
 * A file's name says what it holds: five `config.ts` and five `errors.ts` made
 * every search, stack trace and editor tab ambiguous, and two `job-state.ts` meant different things.
 * No runtime or dev file is named just `config.ts` or `errors.ts`, and no two share `job-state.ts`;
 * `src/contracts/errors.ts`, the API's error codes, keeps its name because it is the one left.
 */
import { readdirSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const GENERIC = new Set(["config.ts", "errors.ts"]);
const ROOMS = ["src", "workers", "sandbox-host", "tools"];
const KEPT = new Set(["src/contracts/errors.ts"]);

const files = (dir: string) =>
  readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" }).map((f) => `${dir}/${f}`);

describe("file names", () => {
  it("no generic config.ts / errors.ts in src/, workers/, sandbox-host/ or tools/ (src/contracts/errors.ts aside)", () => {
    const all = ROOMS.flatMap(files);
    expect(all.length).toBeGreaterThan(100);
    expect(all.filter((f) => GENERIC.has(basename(f)) && !KEPT.has(f))).toEqual([]);
  });
  it("one job-state.ts", () => {
    expect(ROOMS.flatMap(files).filter((f) => basename(f) === "job-state.ts")).toEqual(["src/contracts/job-state.ts"]);
  });
});

/**
 * The host's check that a keeper kill left nothing but tini, the keeper and its sleeper, on
 * `docker top -o pid,ppid,stat` rows. The real engine path is covered in the sandbox integration
 * suite; here, the shapes a hostile command can leave behind, each of which must force a restart.
 */
import { describe, expect, it } from "vitest";
import { onlyKeeperLeft } from "../../sandbox-host/sandbox/exec";

const INIT = 100;
const tini = ["100", "90", "Ss"];
const keeper = ["101", "100", "S"];
const sleeper = ["102", "101", "S"];

describe("onlyKeeperLeft", () => {
  it("accepts tini, the keeper, and at most its one sleeper", () => {
    expect(onlyKeeperLeft([tini, keeper, sleeper], INIT)).toBe(true);
    expect(onlyKeeperLeft([tini, keeper], INIT)).toBe(true);
  });

  it("rejects a command's orphan (a second child of tini)", () => {
    expect(onlyKeeperLeft([tini, keeper, ["150", "100", "S"]], INIT)).toBe(false);
  });

  it("rejects an orphan disguised as the sleeper when the keeper's own sleeper is gone", () => {
    expect(onlyKeeperLeft([tini, keeper, ["150", "100", "S"], ["151", "150", "S"]], INIT)).toBe(false);
  });

  it("rejects a stopped or traced keeper, and zombies tini has not reaped yet", () => {
    expect(onlyKeeperLeft([tini, ["101", "100", "T"], sleeper], INIT)).toBe(false);
    expect(onlyKeeperLeft([tini, ["101", "100", "t"], sleeper], INIT)).toBe(false);
    expect(onlyKeeperLeft([tini, keeper, ["150", "100", "Z"]], INIT)).toBe(false);
  });

  it("rejects a process outside the keeper's tree (an exec still running) and a missing keeper", () => {
    expect(onlyKeeperLeft([tini, keeper, ["160", "55", "S"]], INIT)).toBe(false);
    expect(onlyKeeperLeft([tini], INIT)).toBe(false);
    expect(onlyKeeperLeft([tini, keeper, sleeper, ["103", "101", "S"]], INIT)).toBe(false);
  });
});

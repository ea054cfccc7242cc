/** `npm run dev`'s log files: the gateway's and the hosts' lines, one readable line each. */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { openDevLogs, readableLogLine } from "./dev-logs";

describe("dev logs", () => {
  it("a host's JSON line reads as time, level, label, message and fields", () => {
    const line = JSON.stringify({
      ts: "2026-01-02T10:07:23.786Z",
      level: "info",
      msg: "job started",
      host: "h-1",
      job_id: "j1",
      epoch: 1,
    });
    expect(readableLogLine(line, "host-1")).toBe("10:07:23.786 info  [host-1] job started job_id=j1 epoch=1");
    expect(readableLogLine("plain text", "gateway", new Date("2026-01-02T01:02:03.004Z"))).toBe(
      "01:02:03.004       [gateway] plain text",
    );
  });

  it("writes the gateway's and each host's lines to their files, hosts labelled in the order they speak", async () => {
    const dir = await mkdtemp(join(tmpdir(), "dev-logs-test-"));
    try {
      const logs = await openDevLogs(dir);
      const host = (id: string, msg: string) =>
        JSON.stringify({ ts: new Date().toISOString(), level: "info", msg, host: id });
      expect(logs.write("host", host("b", "sandbox-host started"))).toBe(true);
      expect(logs.write("host", host("a", "sandbox-host started"))).toBe(true);
      expect(logs.write("host", host("b", "job started"))).toBe(true);
      expect(logs.write("gateway", JSON.stringify({ msg: "projector failed" }))).toBe(true);
      expect(logs.write("postgres", "embedded Postgres on …")).toBe(false);
      await logs.close();
      const hosts = (await readFile(logs.paths.hosts, "utf8")).trim().split("\n");
      expect(hosts.map((l) => l.slice(13))).toEqual([
        "info  [host-1] sandbox-host started",
        "info  [host-2] sandbox-host started",
        "info  [host-1] job started",
      ]);
      expect(await readFile(logs.paths.gateway, "utf8")).toContain("[gateway] projector failed");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

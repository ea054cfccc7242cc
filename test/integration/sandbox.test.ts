/**
 * One sandbox against a real Docker engine: lazy creation, exactly one container and network per
 * run and both gone after destroy, idempotence, typed creation failure, hardening (by inspecting
 * the container and from inside it), no route out (read from the sandbox's routing table and
 * interfaces — no traffic is sent anywhere), and the agent's tools.
 */
import { networkInterfaces } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandboxManager, type Sandbox, type SandboxManager } from "../../sandbox-host/sandbox/manager";
import { SandboxError } from "../../sandbox-host/sandbox/sandbox-errors";
import { parseCidr } from "../../sandbox-host/sandbox/subnet";
import { callSandboxTool, SANDBOX_TOOL_SPECS } from "../../sandbox-host/sandbox/tools";
import {
  countHostObjects,
  hostProcesses,
  removeHostObjects,
  requireDocker,
  TEST_IMAGE,
  testHostId,
} from "../helpers/docker";

const docker = await requireDocker();
// Disjoint from the other sandbox suite's pools: vitest runs two files at once.
const POOL = "10.253.240.0/22";

describe.skipIf(!docker)("sandbox lifecycle and tools", () => {
  const hostId = testHostId("sandbox");
  let m: SandboxManager;
  let sb: Sandbox;
  const run = "run-main";

  beforeAll(async () => {
    m = createSandboxManager({ docker: docker!, hostId, image: TEST_IMAGE, pool: POOL });
  });

  afterAll(async () => {
    if (docker) await removeHostObjects(docker, hostId);
  });

  it("creates nothing until a tool needs the sandbox", async () => {
    const idle = createSandboxManager({ docker: docker!, hostId, image: TEST_IMAGE, pool: POOL });
    await new Promise((r) => setTimeout(r, 100));
    expect(idle.active()).toEqual([]);
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 0, networks: 0 });
  });

  it("ensure creates exactly one container and one network, and is idempotent", async () => {
    const [a, b] = await Promise.all([m.ensure(run), m.ensure(run)]);
    sb = a;
    expect(b.containerId).toBe(a.containerId);
    expect((await m.ensure(run)).containerId).toBe(a.containerId);
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 1, networks: 1 });
    expect(m.active().map((s) => s.runId)).toEqual([run]);
    const cidr = parseCidr(sb.subnet)!;
    expect(cidr.prefix).toBe(28);
  });

  it("is hardened: inspected from the engine", async () => {
    const info = await docker!.getContainer(sb.containerId).inspect();
    const hc = info.HostConfig;
    expect(hc.CapDrop).toEqual(["ALL"]);
    expect(hc.CapAdd ?? []).toEqual([]);
    expect(hc.SecurityOpt).toContain("no-new-privileges");
    expect(hc.ReadonlyRootfs).toBe(true);
    expect(hc.Privileged).toBe(false);
    expect(hc.Init).toBe(true);
    expect(hc.Memory).toBe(m.profile.memoryBytes);
    expect(hc.MemorySwap).toBe(m.profile.memoryBytes);
    expect(hc.NanoCpus).toBe(m.profile.nanoCpus);
    expect(hc.PidsLimit).toBe(m.profile.pidsLimit);
    expect(info.Config.User).toBe("65534:65534");
    expect(Object.keys(hc.Tmpfs ?? {}).sort()).toEqual(["/tmp", "/workspace"]);
    expect(hc.ShmSize).toBe(m.profile.shmBytes);
    expect(hc.NetworkMode).toBe(sb.networkName);
    const net = await docker!.getNetwork(sb.networkId).inspect();
    expect(net.Internal).toBe(true);
    expect(net.IPAM?.Config?.[0]?.Subnet).toBe(sb.subnet);
  });

  it("is hardened: seen from inside", async () => {
    const r = await m.exec(run, {
      cmd: "id -u; id -g; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status; touch /etc/x 2>&1; touch /workspace/ok && echo workspace-writable",
    });
    expect(r.exitCode).toBe(0);
    const out = r.stdout;
    expect(out).toMatch(/^65534\n65534\n/);
    expect(out).toMatch(/CapEff:\s+0000000000000000/);
    expect(out).toMatch(/CapPrm:\s+0000000000000000/);
    expect(out).toMatch(/CapBnd:\s+0000000000000000/);
    expect(out).toMatch(/NoNewPrivs:\s+1/);
    expect(out).toMatch(/Read-only file system/);
    expect(out).toContain("workspace-writable");
    // /dev/shm (the private IPC namespace's tmpfs, 64 MiB writable by default): small, and no exec.
    const shm = await m.exec(run, {
      cmd: `grep ' /dev/shm ' /proc/mounts; head -c ${m.profile.shmBytes + 1024 * 1024} /dev/zero 2>&1 > /dev/shm/fill; echo bytes $(wc -c < /dev/shm/fill); rm -f /dev/shm/fill`,
    });
    const mount = shm.stdout.split("\n")[0] ?? "";
    for (const flag of ["noexec", "nosuid", "nodev"]) expect(mount).toMatch(new RegExp(`[ ,]${flag}[ ,]`));
    expect(mount).toContain(`size=${m.profile.shmBytes / 1024}k`);
    // The write past the size fails (busybox head says "I/O error", coreutils "No space left on device").
    expect(shm.stdout).toMatch(/I\/O error|No space left on device/);
    const written = Number(/bytes (\d+)/.exec(shm.stdout)?.[1]);
    expect(written).toBeLessThanOrEqual(m.profile.shmBytes);
    // PID 1 is the init process, not the sleeper.
    const init = await m.exec(run, { cmd: "cat /proc/1/comm" });
    expect(init.stdout.trim()).not.toBe("sleep");
  });

  it("has no route out: its routing table and interfaces, read from inside", async () => {
    const r = await m.exec(run, { cmd: "cat /proc/net/route; echo ---; cat /proc/net/dev; echo ---; ip -o -4 addr" });
    expect(r.exitCode).toBe(0);
    const [routeText, devText, addrText] = r.stdout.split("---\n") as [string, string, string];
    const ifaces = devText
      .split("\n")
      .slice(2)
      .map((l) => l.split(":")[0]!.trim())
      .filter(Boolean)
      .sort();
    expect(ifaces).toEqual(["eth0", "lo"]);
    const subnet = parseCidr(sb.subnet)!;
    const addrs = [...addrText.matchAll(/inet (\d+\.\d+\.\d+\.\d+)\/(\d+)/g)].map((x) => x[1]!);
    expect(addrs).toHaveLength(2);
    expect(addrs).toContain("127.0.0.1");
    const ownIp = addrs.find((a) => a !== "127.0.0.1")!;
    expect(parseCidr(`${ownIp}/28`)!.base).toBe(subnet.base);

    // /proc/net/route: hex, little-endian addresses.
    const hexIp = (h: string) => Buffer.from(h, "hex").reverse().join(".");
    const routes = routeText
      .split("\n")
      .slice(1)
      .filter(Boolean)
      .map((l) => l.split("\t"))
      .map((f) => ({ iface: f[0]!, dest: hexIp(f[1]!), gw: hexIp(f[2]!), mask: hexIp(f[7]!) }));
    expect(routes.length).toBeGreaterThan(0);
    for (const route of routes) {
      expect(route.iface).toBe("eth0");
      if (route.dest === "0.0.0.0") {
        // Docker < 25 still installs a default route on internal networks. Its next hop must be a
        // dead end: an address no host interface holds (the bridge is created without one).
        const version = Number((await docker!.version()).Version.split(".")[0]);
        expect(version, "Docker >= 25 gives internal networks no default route").toBeLessThan(25);
        const hostAddrs = Object.values(networkInterfaces())
          .flat()
          .map((i) => i?.address);
        expect(hostAddrs).not.toContain(route.gw);
        expect(parseCidr(`${route.gw}/28`)!.base).toBe(subnet.base);
      } else {
        // The only other route is the sandbox's own /28, on-link (no gateway).
        expect(`${route.dest}/${route.mask}`).toBe(`${sb.subnet.split("/")[0]}/255.255.255.240`);
        expect(route.gw).toBe("0.0.0.0");
      }
    }
    // And the host side of its bridge holds no IPv4 address the sandbox could reach.
    const bridge = networkInterfaces()[`br-${sb.networkId.slice(0, 12)}`] ?? [];
    expect(bridge.filter((i) => i.family === "IPv4")).toEqual([]);
  });

  it("wget fails with a network error, never a segfault (busybox's wget crashed on -T)", async () => {
    const segfault = /Segmentation fault/;
    // Through a shell that goes on after wget, as a model's command does: it reports how wget died.
    const run1 = async (cmd: string) => {
      const r = await m.exec(run, { cmd: `${cmd}; echo "exit=$?"`, timeoutMs: 30_000 });
      const exit = Number(/exit=(\d+)/.exec(r.stdout)?.[1]);
      return { exit, out: `${r.stdout}${r.stderr}` };
    };
    const plain = await run1("wget http://example.com");
    expect(plain.out).not.toMatch(segfault);
    expect(plain.out).toMatch(/wget: bad address 'example.com'/); // no DNS answers inside
    expect(plain.exit).toBe(1);
    // -T is accepted and ignored (this busybox has no wget timeout): the same network error.
    const timed = await run1("wget -T 2 http://example.com");
    expect(timed.out).not.toMatch(segfault);
    expect(timed.out).toMatch(/wget: bad address 'example.com'/);
    expect(timed.exit).toBe(1);
    // An address needs no DNS: the error is the missing route, with -T inside an option cluster.
    const direct = await run1("wget -qT5 -O - http://192.0.2.1/");
    expect(direct.out).not.toMatch(segfault);
    expect(direct.out).toMatch(
      /wget: can't connect to remote host \(192\.0\.2\.1\): (No route to host|Network is unreachable)/,
    );
    expect(direct.exit).toBe(1);
  }, 60_000);

  it("shell: exit code, stderr, and output capped with a visible marker", async () => {
    const r = await m.exec(run, { cmd: "echo out; echo err >&2; exit 7" });
    expect(r).toMatchObject({ exitCode: 7, stdout: "out\n", stderr: "err\n", truncated: false, timedOut: false });
    const big = await m.exec(run, { cmd: "head -c 100000 /dev/zero | tr '\\0' x", outputCapBytes: 1000 });
    expect(big.exitCode).toBe(0);
    expect(big.stdoutBytes).toBe(100000);
    expect(big.truncated).toBe(true);
    expect(big.stdout.startsWith("x".repeat(1000))).toBe(true);
    expect(big.stdout).toContain("[truncated: 99000 more bytes of stdout]");
  });

  it("shell: a timeout kills the command and its background children", async () => {
    const t0 = performance.now();
    const r = await m.exec(run, { cmd: "sleep 300 & sleep 301; echo unreachable", timeoutMs: 1000 });
    const ms = performance.now() - t0;
    expect(r.timedOut).toBe(true);
    expect(r.stdout).not.toContain("unreachable");
    expect(ms).toBeLessThan(4000);
    const ps = await m.exec(run, { cmd: "ps -o args" });
    expect(ps.stdout).not.toMatch(/sleep 30[01]/);
  });

  it("cancellation (AbortSignal) kills a running sleep", async () => {
    const ac = new AbortController();
    const t0 = performance.now();
    const pending = m.exec(run, { cmd: "sleep 120", signal: ac.signal, timeoutMs: 300_000 });
    setTimeout(() => ac.abort(), 500);
    const r = await pending;
    expect(r.cancelled).toBe(true);
    expect(r.exitCode).not.toBe(0);
    expect(performance.now() - t0).toBeLessThan(4000);
    const ps = await m.exec(run, { cmd: "ps -o args" });
    expect(ps.stdout).not.toContain("sleep 120");
  });

  // Timeouts and cancellation must hold whatever the command does: a process that dropped its
  // environment (env -i), one that filled the pids limit, one that stopped the sandbox's own
  // processes. The survivors are looked for from the host, through the engine (docker top).
  const hostArgs = async () => (await hostProcesses(docker!, sb.containerId)).map((p) => p.args);
  /** Waits until the sandbox holds at least `n` processes (the command has filled the pids limit). */
  const untilProcesses = async (n: number) => {
    for (let i = 0; i < 200; i++) {
      if ((await hostProcesses(docker!, sb.containerId)).length >= n) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`the sandbox never held ${n} processes`);
  };

  it("a timeout kills processes that escaped with env -i and setsid; the workspace stays and the next command runs", async () => {
    await m.exec(run, { cmd: "echo kept > kept.txt" });
    const t0 = performance.now();
    const r = await m.exec(run, {
      cmd: "env -i sh -c 'sleep 987 &'; env -i setsid sleep 988 & sleep 986",
      timeoutMs: 1000,
    });
    expect(r.timedOut).toBe(true);
    expect(await hostArgs()).not.toContainEqual(expect.stringMatching(/sleep 98[678]/));
    expect(performance.now() - t0).toBeLessThan(4000);
    expect(r.sandboxRestarted).toBe(false);
    const next = await m.exec(run, { cmd: "cat kept.txt; sleep 0 & wait; echo forked" });
    expect(next).toMatchObject({ exitCode: 0, stdout: "kept\nforked\n" });
  });

  it("a command that fills the pids limit and times out leaves a sandbox that can fork", async () => {
    // A shell that cannot fork exits, so the loop runs in a subshell and the command waits on.
    const pending = m.exec(run, {
      cmd: "sleep 981 & (while :; do sleep 985 & done) 2>/dev/null; wait",
      // 8 s, not 3: the check below must see the limit filled before the timeout kills the loop;
      // at load 10 forking 252 sleeps and polling `docker top` took longer than 3 s and it never did.
      timeoutMs: 8000,
    });
    await untilProcesses(m.profile.pidsLimit - 4);
    const r = await pending;
    expect(r.timedOut).toBe(true);
    expect(await hostArgs()).not.toContainEqual(expect.stringMatching(/sleep 98[15]/));
    const next = await m.exec(run, { cmd: "cat kept.txt; sleep 0 & wait; echo forked" });
    expect(next).toMatchObject({ exitCode: 0, stdout: "kept\nforked\n" });
  });

  it("cancellation mid-command: env -i escapes and a full pids limit are killed too", async () => {
    const ac = new AbortController();
    const pending = m.exec(run, {
      cmd: "env -i sh -c 'sleep 984 &'; sleep 980 & (while :; do sleep 983 & done) 2>/dev/null; wait",
      signal: ac.signal,
      timeoutMs: 300_000,
    });
    await untilProcesses(m.profile.pidsLimit - 4);
    const t0 = performance.now();
    ac.abort();
    const r = await pending;
    expect(r.cancelled).toBe(true);
    expect(performance.now() - t0).toBeLessThan(4000);
    expect(await hostArgs()).not.toContainEqual(expect.stringMatching(/sleep 98[034]/));
    const next = await m.exec(run, { cmd: "cat kept.txt; sleep 0 & wait; echo forked" });
    expect(next).toMatchObject({ exitCode: 0, stdout: "kept\nforked\n" });
  });

  it("a command that stops every other process in the sandbox is still killed: the sandbox restarts", async () => {
    const r = await m.exec(run, { cmd: "env -i sh -c 'kill -STOP -1; sleep 982'", timeoutMs: 1000 });
    expect(r.timedOut).toBe(true);
    expect(await hostArgs()).not.toContainEqual(expect.stringMatching(/sleep 982/));
    expect(r.sandboxRestarted).toBe(true);
    // The restart costs the workspace (a tmpfs): the result says so, and the next command runs.
    const next = await m.exec(run, { cmd: "ls; sleep 0 & wait; echo forked" });
    expect(next).toMatchObject({ exitCode: 0, stdout: "forked\n" });
  });

  it("a command that kills every process it can (kill -9 -1) does not leave the run without a sandbox", async () => {
    await callSandboxTool(m, run, "shell", { command: "kill -9 -1" });
    const next = await callSandboxTool(m, run, "shell", { command: "sleep 0 & wait; echo forked" });
    // The keeper died with the rest, and tini with it: the container was started again, and the
    // model is told its workspace is empty.
    expect(next).toMatchObject({ ok: true, output: { exit_code: 0, stdout: "forked\n", sandbox_restarted: true } });
  });

  it("files: binary-safe write/read round trip through the tools", async () => {
    const bytes = Buffer.alloc(300_000);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 131 + (i >> 8)) & 255;
    const w = await callSandboxTool(m, run, "write_file", {
      path: "data/blob.bin",
      content: bytes.toString("base64"),
      encoding: "base64",
    });
    expect(w).toEqual({ ok: true, output: { path: "/workspace/data/blob.bin", size: bytes.length } });
    const r = await callSandboxTool(m, run, "read_file", { path: "/workspace/data/blob.bin", encoding: "base64" });
    expect(r.ok).toBe(true);
    const out = (r as { output: { content: string; size: number; truncated: boolean } }).output;
    expect(out.size).toBe(bytes.length);
    expect(out.truncated).toBe(false);
    expect(Buffer.from(out.content, "base64").equals(bytes)).toBe(true);
    // The sandbox sees the same bytes.
    const sum = await m.exec(run, { cmd: "sha256sum data/blob.bin" });
    const { createHash } = await import("node:crypto");
    expect(sum.stdout.split(" ")[0]).toBe(createHash("sha256").update(bytes).digest("hex"));

    await m.writeFile(run, "notes/é ü.txt", "héllo\n");
    const text = await callSandboxTool(m, run, "read_file", { path: "notes/é ü.txt" });
    expect(text).toMatchObject({ ok: true, output: { encoding: "utf8", content: "héllo\n" } });
    const partial = await m.readFile(run, "data/blob.bin", { maxBytes: 10 });
    expect(partial).toMatchObject({ size: bytes.length, truncated: true });
    expect(partial.data.equals(bytes.subarray(0, 10))).toBe(true);

    const ls = await callSandboxTool(m, run, "list_dir", { path: "." });
    expect(ls).toMatchObject({ ok: true, output: { path: "/workspace", truncated: false } });
    const entries = (ls as { output: { entries: Array<{ name: string; type: string }> } }).output.entries;
    expect(entries).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: "data", type: "dir" }),
        expect.objectContaining({ name: "notes", type: "dir" }),
      ]),
    );
  });

  it("files: paths outside /workspace are rejected, lexically and through symlinks", async () => {
    for (const path of ["../etc/passwd", "/etc/passwd", "a/../../etc/shadow", "/workspace/../root"]) {
      const r = await callSandboxTool(m, run, "read_file", { path });
      expect(r).toMatchObject({ ok: false, error: { code: "path_outside_workspace" } });
    }
    await m.exec(run, { cmd: "ln -s /etc /workspace/etc-link" });
    expect(await callSandboxTool(m, run, "read_file", { path: "etc-link/passwd" })).toMatchObject({
      ok: false,
      error: { code: "path_outside_workspace" },
    });
    expect(await callSandboxTool(m, run, "write_file", { path: "etc-link/new", content: "x" })).toMatchObject({
      ok: false,
      error: { code: "path_outside_workspace" },
    });
    expect(await callSandboxTool(m, run, "list_dir", { path: "etc-link" })).toMatchObject({
      ok: false,
      error: { code: "path_outside_workspace" },
    });
    expect(await callSandboxTool(m, run, "read_file", { path: "missing.txt" })).toMatchObject({
      ok: false,
      error: { code: "not_found" },
    });
    expect(await callSandboxTool(m, run, "shell", { command: 42 })).toMatchObject({
      ok: false,
      error: { code: "invalid_input" },
    });
  });

  it("publishes tool specs with JSON schemas for the model", () => {
    expect(SANDBOX_TOOL_SPECS.map((t) => t.name).sort()).toEqual(["list_dir", "read_file", "shell", "write_file"]);
    const shell = SANDBOX_TOOL_SPECS.find((t) => t.name === "shell")!;
    expect(shell.parameters).toMatchObject({ type: "object", required: ["command"] });
  });

  it("destroy removes the container and its network, and is idempotent", async () => {
    expect(await m.destroy(run)).toEqual({ containers: 1, networks: 1 });
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 0, networks: 0 });
    await expect(docker!.getNetwork(sb.networkId).inspect()).rejects.toMatchObject({ statusCode: 404 });
    expect(await m.destroy(run)).toEqual({ containers: 0, networks: 0 });
    expect(await m.destroy("never-created")).toEqual({ containers: 0, networks: 0 });
    expect(m.active()).toEqual([]);
  });

  it("a creation failure is a typed error and leaves nothing behind", async () => {
    const broken = createSandboxManager({ docker: docker!, hostId, image: "ear-sandbox:no-such-tag", pool: POOL });
    const err = await broken.ensure("run-broken").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect(err).toMatchObject({ code: "create_failed", runId: "run-broken" });
    expect(String((err as Error).message)).toContain("sandbox:image");
    expect(await countHostObjects(docker!, hostId)).toEqual({ containers: 0, networks: 0 });
    // And the tool dispatcher throws it (the run fails) instead of handing it to the model.
    await expect(callSandboxTool(broken, "run-broken", "shell", { command: "true" })).rejects.toMatchObject({
      code: "create_failed",
    });
  });
});

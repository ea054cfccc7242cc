/** Stopping children we started in their own process group: TERM the group, then KILL after a grace. */
import type { ChildProcess } from "node:child_process";

export async function stopProcessGroup(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), sig);
    } catch {
      try {
        child.kill(sig);
      } catch {}
    }
  };
  signal("SIGTERM");
  const timer = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), graceMs).unref());
  if ((await Promise.race([exited, timer])) === "timeout") {
    signal("SIGKILL");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 2000).unref())]);
  } else {
    // The group leader is gone; make sure no grandchild (workerd) outlived it.
    signal("SIGKILL");
  }
}

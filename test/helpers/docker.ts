/**
 * Docker-backed suites: `requireDocker()` skips with a clear message on a machine without a
 * reachable engine, but fails under CI=true (`.ci/run` installs docker.io and starts dockerd).
 * It also builds the local sandbox image when it is missing. Every suite labels what it creates
 * with its own host id and removes everything carrying that label afterwards.
 */
import { randomUUID } from "node:crypto";
import { connectDocker, type Docker } from "../../sandbox-host/sandbox/docker";
import { LABEL_HOST } from "../../sandbox-host/sandbox/manager";
import { ensureSandboxImage, LOCAL_SANDBOX_IMAGE } from "../../tools/build/sandbox-image";

export const TEST_IMAGE = LOCAL_SANDBOX_IMAGE;

/** Returns a client when the suite can run; throws under CI when it cannot. */
export async function requireDocker(): Promise<Docker | null> {
  const docker = connectDocker();
  try {
    await docker.ping();
  } catch (err) {
    const msg = `no Docker engine reachable at /var/run/docker.sock (${(err as Error).message}); the sandbox suites are skipped`;
    if (process.env.CI === "true") throw new Error(`${msg} — but CI=true, so this is a failure`);
    console.warn(msg);
    return null;
  }
  // Built when missing, and rebuilt when it predates the recipe in tools/build/sandbox-image.ts.
  await ensureSandboxImage({ docker, image: TEST_IMAGE });
  return docker;
}

/** A host id no other suite (or earlier run) uses, so label filters see only this suite's objects. */
export function testHostId(suite: string): string {
  return `test-${suite}-${randomUUID().slice(0, 8)}`;
}

/** Every container and network labelled with this host id (force-removed). */
export async function removeHostObjects(
  docker: Docker,
  hostId: string,
): Promise<{ containers: number; networks: number }> {
  const filters = JSON.stringify({ label: [`${LABEL_HOST}=${hostId}`] });
  const containers = await docker.listContainers({ all: true, filters });
  await Promise.all(
    containers.map((c) =>
      docker
        .getContainer(c.Id)
        .remove({ force: true, v: true })
        .catch(() => {}),
    ),
  );
  const networks = await docker.listNetworks({ filters });
  await Promise.all(
    networks.map((n) =>
      docker
        .getNetwork(n.Id)
        .remove()
        .catch(() => {}),
    ),
  );
  return { containers: containers.length, networks: networks.length };
}

export async function countHostObjects(
  docker: Docker,
  hostId: string,
): Promise<{ containers: number; networks: number }> {
  const filters = JSON.stringify({ label: [`${LABEL_HOST}=${hostId}`] });
  const [containers, networks] = await Promise.all([
    docker.listContainers({ all: true, filters }),
    docker.listNetworks({ filters }),
  ]);
  return { containers: containers.length, networks: networks.length };
}

/**
 * The processes of a container as the engine sees them (`docker top`, run by the engine on its
 * own host), so a test need not trust anything inside the sandbox to find survivors.
 */
export async function hostProcesses(
  docker: Docker,
  containerId: string,
): Promise<Array<{ pid: number; ppid: number; stat: string; args: string }>> {
  const top = await docker.getContainer(containerId).top({ ps_args: "-o pid,ppid,stat,args" });
  return ((top.Processes ?? []) as string[][]).map(([pid, ppid, stat, ...rest]) => ({
    pid: Number(pid),
    ppid: Number(ppid),
    stat: stat ?? "",
    args: rest.join(" "),
  }));
}

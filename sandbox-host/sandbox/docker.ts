/**
 * The one place that imports dockerode. Everything else in the runtime takes a `Docker` handle
 * from here (or a test double), so the engine can be swapped or wrapped without touching callers.
 */
import Docker from "dockerode";

export type { default as Docker } from "dockerode";

export interface DockerConnectOptions {
  /** Unix socket of the engine; dockerode's default is /var/run/docker.sock. */
  socketPath?: string;
}

export function connectDocker(opts: DockerConnectOptions = {}): Docker {
  return new Docker(opts.socketPath ? { socketPath: opts.socketPath } : {});
}

/** Status code of a Docker Engine API error (dockerode puts it on `statusCode`). */
export function dockerStatus(err: unknown): number | null {
  const s = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof s === "number" ? s : null;
}

export function isNotFound(err: unknown): boolean {
  return dockerStatus(err) === 404;
}

/** "Already stopped" (304) and "removal already in progress" (409) are success for a delete. */
export function isGoneOrGoing(err: unknown): boolean {
  const s = dockerStatus(err);
  if (s === 404 || s === 304) return true;
  return s === 409 && /removal .* in progress|is already in progress/i.test(errorText(err));
}

export function errorText(err: unknown): string {
  const json = (err as { json?: { message?: unknown } } | null)?.json;
  if (json && typeof json.message === "string") return json.message;
  return err instanceof Error ? err.message : String(err);
}

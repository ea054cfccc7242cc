/**
 * The run inspector's artifacts: the files the run left under /workspace/out/ (GET
 * /v1/jobs/{id}/artifacts), read once the job has ended (they are recorded just before its
 * terminal write), each downloadable. A download goes through the typed client with the
 * console's credential (a plain link could not carry the Authorization header) and is saved
 * from an object URL under the file's own name.
 */
import { useEffect, useState } from "preact/hooks";
import type { ArtifactView } from "../../src/contracts/artifacts";
import { isFinalState } from "../../src/contracts/job-state";
import { client, type JobView } from "./api";

function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

async function download(jobId: string, a: ArtifactView): Promise<void> {
  const blob = await client.artifact(jobId, a.path);
  const url = URL.createObjectURL(blob);
  try {
    const link = document.createElement("a");
    link.href = url;
    link.download = a.path.slice(a.path.lastIndexOf("/") + 1);
    document.body.append(link);
    link.click();
    link.remove();
  } finally {
    // After the click has handed the URL to the download: revoking at once can cancel it.
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  }
}

export function Artifacts({ job }: { job: JobView }) {
  const [artifacts, setArtifacts] = useState<ArtifactView[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const ended = isFinalState(job.state);
  useEffect(() => {
    setArtifacts(null);
    setError(null);
    if (!ended) return;
    const ctl = new AbortController();
    client
      .artifacts(job.id, { signal: ctl.signal })
      .then((r) => ctl.signal.aborted || setArtifacts(r.artifacts))
      .catch((err) => ctl.signal.aborted || setError((err as Error).message));
    return () => ctl.abort();
  }, [job.id, ended]);
  if (!ended) return null;
  return (
    <section class="artifacts" aria-label="Artifacts" data-testid="inspector-artifacts">
      <h3>Artifacts</h3>
      {error ? (
        <p class="error">{error}</p>
      ) : artifacts === null ? (
        <p class="muted">loading…</p>
      ) : artifacts.length === 0 ? (
        <p class="muted">none: the run left no file under /workspace/out/</p>
      ) : (
        <ul>
          {artifacts.map((a) => (
            <li key={a.path} data-path={a.path}>
              <button
                type="button"
                class="link"
                onClick={() => void download(job.id, a).catch((err) => setError((err as Error).message))}
              >
                {a.path}
              </button>{" "}
              <span class="muted">
                {formatBytes(a.bytes)} · {a.content_type} · <code title={a.sha256}>{a.sha256.slice(0, 12)}</code>
              </span>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

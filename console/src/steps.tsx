/**
 * The run inspector's steps (GET /v1/jobs/{id}/steps, docs/api.md "Steps, forks and reruns"):
 * the job's journal in the order a recovery reads it, a page at a time, read again when the job's
 * state changes. Each step offers a fork from it (POST /v1/jobs/{id}/fork with `from_step`), and
 * the job a rerun (POST /v1/jobs/{id}/rerun); either may name another agent version. A made job
 * opens in the inspector.
 */
import { useEffect, useState } from "preact/hooks";
import type { StepPage } from "../../src/client/client";
import { client, type JobView } from "./api";
import { Alert, errorText, when } from "./list";

const PAGE = 50;

export function Steps({ job }: { job: JobView }) {
  const [steps, setSteps] = useState<StepPage["steps"] | null>(null);
  const [next, setNext] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [agent, setAgent] = useState("");
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    const ctl = new AbortController();
    setError(null);
    client
      .steps(job.id, { limit: PAGE }, { signal: ctl.signal })
      .then((p) => {
        if (ctl.signal.aborted) return;
        setSteps(p.steps);
        setNext(p.next_after);
      })
      .catch((err) => ctl.signal.aborted || setError(errorText(err)));
    return () => ctl.abort();
  }, [job.id, job.state]);

  const more = async () => {
    if (next === null) return;
    try {
      const p = await client.steps(job.id, { after: next, limit: PAGE });
      setSteps((s) => [...(s ?? []), ...p.steps]);
      setNext(p.next_after);
    } catch (err) {
      setError(errorText(err));
    }
  };

  /** Makes the new job and opens it; the agent field, when filled, names the version it runs. */
  const make = async (work: (body: { agent?: string }) => Promise<{ job: { id: string } }>) => {
    setBusy(true);
    setError(null);
    try {
      const made = await work(agent.trim() ? { agent: agent.trim() } : {});
      location.hash = `#/jobs/${made.job.id}`;
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section class="steps" aria-labelledby="steps-title" data-testid="inspector-steps">
      <h3 id="steps-title">Steps</h3>
      <p class="muted">
        The job's journal, as a recovery reads it. A fork is a new job that continues after a step: the steps up to it
        are read, never changed, and their tool calls are not made again. A rerun starts again from the input.
      </p>
      <div class="toolbar">
        <label for="fork-agent">Agent for the new job</label>
        <input
          id="fork-agent"
          placeholder={job.agent ? `${job.agent.name}@${job.agent.version}` : "this job's"}
          value={agent}
          onInput={(e) => setAgent((e.target as HTMLInputElement).value)}
        />
        <button
          type="button"
          data-testid="rerun"
          disabled={busy}
          onClick={() => void make((b) => client.rerun(job.id, b))}
        >
          Rerun from the input
        </button>
        <button
          type="button"
          data-testid="fork-all"
          disabled={busy}
          onClick={() => void make((b) => client.fork(job.id, b))}
        >
          Fork after every step so far
        </button>
      </div>
      <Alert error={error} />
      {steps === null && !error && <p class="muted">loading…</p>}
      {steps && steps.length === 0 && <p class="muted">no steps journaled yet</p>}
      {steps && steps.length > 0 && (
        <div class="scroll">
          <table class="list" data-testid="steps-table">
            <thead>
              <tr>
                <th scope="col">step</th>
                <th scope="col">kind</th>
                <th scope="col">at</th>
                <th scope="col">tool</th>
                <th scope="col">summary</th>
                <th scope="col">fork</th>
              </tr>
            </thead>
            <tbody>
              {steps.map((s) => (
                <tr key={s.step} data-step={s.step}>
                  <td>{s.step}</td>
                  <td>{s.kind}</td>
                  <td>{when(s.at)}</td>
                  <td>{s.tool ? <code>{s.tool}</code> : "–"}</td>
                  <td class="wrap">{s.summary}</td>
                  <td>
                    <button
                      type="button"
                      disabled={busy}
                      onClick={() => void make((b) => client.fork(job.id, { ...b, from_step: s.step }))}
                    >
                      Fork after step {s.step}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {next !== null && (
        <button type="button" onClick={() => void more()}>
          More steps
        </button>
      )}
    </section>
  );
}

/**
 * The card for a run waiting on a person, shown under its answer in the chat and in the run
 * inspector alike: an approval gate (the tool, its arguments, the deadline; Approve or Deny with an
 * optional note, sent as POST /v1/jobs/{id}/approvals/{call_id}) or an `ask_user` question (a reply
 * box, sent as POST /v1/jobs/{id}/input). The card only sends; the run's own events (`run.resumed`)
 * close it, so every tab showing the job sees the same outcome.
 */
import { useState } from "preact/hooks";
import { Value } from "./answer";
import { client } from "./api";
import type { Wait } from "./run";

export function ApprovalCard({ jobId, wait }: { jobId: string; wait: Wait }) {
  const [note, setNote] = useState("");
  const [sent, setSent] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const idBase = `wait-${wait.call_id}`;

  const act = async (what: string, f: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    try {
      await f();
      setSent(what);
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const decide = (decision: "approve" | "deny") =>
    act(decision === "approve" ? "approved" : "denied", () =>
      client.decide(jobId, wait.call_id, { decision, ...(note.trim() ? { note: note.trim() } : {}) }),
    );
  const answer = (e: Event) => {
    e.preventDefault();
    if (note.trim()) void act("answered", () => client.input(jobId, { content: note.trim() }));
  };

  const heading = wait.kind === "approval" ? "Approval needed" : "The agent asks";
  return (
    <section
      class="approval"
      aria-labelledby={`${idBase}-h`}
      data-testid="approval-card"
      data-call-id={wait.call_id}
      data-kind={wait.kind}
    >
      <h4 id={`${idBase}-h`}>{heading}</h4>
      {wait.kind === "approval" ? (
        <>
          <p>
            tool <code data-testid="approval-tool">{wait.tool}</code>
          </p>
          <div data-testid="approval-args">
            <Value value={wait.arguments} />
          </div>
        </>
      ) : (
        <p data-testid="approval-question">{wait.question}</p>
      )}
      <p class="muted">
        {wait.kind === "approval" ? "decide" : "answer"} by <time dateTime={wait.deadline_at}>{wait.deadline_at}</time>
      </p>
      {sent ? (
        <p role="status" data-testid="approval-sent">
          {sent}; waiting for the run to resume…
        </p>
      ) : wait.kind === "approval" ? (
        <div class="approval-actions">
          <label for={`${idBase}-note`}>Note (optional; a denial's note is what the model is told)</label>
          <input
            id={`${idBase}-note`}
            type="text"
            maxLength={4096}
            value={note}
            onInput={(e) => setNote((e.target as HTMLInputElement).value)}
          />
          <button type="button" class="primary" disabled={busy} onClick={() => void decide("approve")}>
            Approve
          </button>
          <button type="button" class="danger" disabled={busy} onClick={() => void decide("deny")}>
            Deny
          </button>
        </div>
      ) : (
        <form class="approval-actions" onSubmit={answer}>
          <label for={`${idBase}-note`}>Your answer</label>
          <input
            id={`${idBase}-note`}
            type="text"
            value={note}
            onInput={(e) => setNote((e.target as HTMLInputElement).value)}
          />
          <button type="submit" class="primary" disabled={busy || !note.trim()}>
            Reply
          </button>
        </form>
      )}
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
    </section>
  );
}

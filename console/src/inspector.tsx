/**
 * The run inspector: any job's events replayed from its log (SSE from offset 0, then live while it
 * runs). It opens on the job's cost and tokens, its spend against its budget (budget.tsx), its
 * input and output and the files it left (artifacts.tsx), then the run as a waterfall
 * (waterfall-view.tsx); the job's steps with fork and rerun (steps.tsx) and the raw events in the
 * debug panel stay below. The slider shows
 * the run as it stood after any event; Play steps through them again.
 */
import { useEffect, useRef, useState } from "preact/hooks";
import { isFinalState } from "../../src/contracts/job-state";
import { AnswerBody, OutputJson, RunFacts } from "./answer";
import { client, isTerminal, type JobView } from "./api";
import { ApprovalCard } from "./approval";
import { Artifacts } from "./artifacts";
import { Budget } from "./budget";
import { DebugPanel } from "./debug-panel";
import { foldRun, type OffsetEvent, pendingWait } from "./run";
import { Steps } from "./steps";
import { Waterfall } from "./waterfall-view";

/**
 * The user's messages that made the job. A job of a conversation: read from the conversation
 * (GET /v1/conversations/{id}/messages, the messages whose job this is), since its submitted input
 * also carries the conversation's history. Any other job: its submitted input's user messages
 * (GET /v1/jobs/{id}?include=input).
 */
function useInput(job: JobView | null): { text: string[] | null; error: string | null } {
  const [text, setText] = useState<string[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const conversation = job?.conversation_id ?? null;
  const id = job?.id ?? null;
  useEffect(() => {
    setText(null);
    setError(null);
    if (!id) return;
    const ctl = new AbortController();
    const read: Promise<string[]> = conversation
      ? client
          .messages(conversation, { signal: ctl.signal })
          .then((m) => m.messages.filter((x) => x.role === "user" && x.job_id === id).map((x) => x.content))
      : client
          .get(id, { include: "input", signal: ctl.signal })
          .then((a) => (a.job.input?.messages ?? []).filter((x) => x.role === "user").map((x) => x.content));
    read
      .then((t) => ctl.signal.aborted || setText(t))
      .catch((err) => ctl.signal.aborted || setError((err as Error).message));
    return () => ctl.abort();
  }, [conversation, id]);
  return { text, error };
}

function InputOutput({ job }: { job: JobView }) {
  const input = useInput(job);
  return (
    <section class="io" aria-label="Input and output" data-testid="inspector-io">
      <div>
        <h3>Input</h3>
        {input.error ? (
          <p class="error">{input.error}</p>
        ) : input.text === null ? (
          <p class="muted">loading…</p>
        ) : (
          <pre data-testid="inspector-input">{input.text.join("\n\n")}</pre>
        )}
      </div>
      <div>
        <h3>Output</h3>
        {job.error ? (
          <p class="error" data-testid="inspector-output">{`${job.error.code}: ${job.error.message}`}</p>
        ) : (
          <pre data-testid="inspector-output">{job.output ?? "–"}</pre>
        )}
      </div>
    </section>
  );
}

/** How the inspector names what a waiting job waits for, by wait kind. */
const WAITING_FOR = {
  approval: "an approval of",
  input: "an answer to",
  children: "the child jobs of",
  budget: "more budget (add_usd) for",
} as const;

export function Inspector({ jobId }: { jobId: string }) {
  const [job, setJob] = useState<JobView | null>(null);
  const [events, setEvents] = useState<OffsetEvent[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [upTo, setUpTo] = useState<number | null>(null); // null: follow the newest event
  const [playing, setPlaying] = useState(false);
  const timer = useRef<ReturnType<typeof setInterval> | undefined>(undefined);

  useEffect(() => {
    const ctl = new AbortController();
    setJob(null);
    setEvents([]);
    setError(null);
    setUpTo(null);
    const got: OffsetEvent[] = [];
    // Every job read of this effect is bound to its signal and checked after it: a read of the
    // job shown before (its terminal event's refresh) that answered after a click to another job
    // put that job's view under this one's heading (a browser test saw a child inspector showing
    // its parent's facts).
    const show = ({ job: v }: { job: JobView }) => ctl.signal.aborted || setJob(v);
    client
      .get(jobId, { signal: ctl.signal })
      .then(show)
      .catch((err) => ctl.signal.aborted || setError((err as Error).message));
    (async () => {
      for await (const { id, event } of client.events(jobId, { signal: ctl.signal })) {
        got.push({ offset: id, event });
        setEvents([...got]);
        // The job view changes at the end, and at a wait (`waiting_for`) and its resume.
        if (isTerminal(event.type) || event.type === "run.suspended" || event.type === "run.resumed")
          void client.get(jobId, { signal: ctl.signal }).then(show, () => {});
      }
    })().catch((err) => ctl.signal.aborted || setError(`events: ${(err as Error).message}`));
    return () => ctl.abort();
  }, [jobId]);

  useEffect(() => () => clearInterval(timer.current), []);

  const shown = upTo === null ? events : events.slice(0, upTo);
  const run = foldRun(shown);
  // Deciding is offered on the whole log only, never on a replayed prefix.
  const wait = upTo === null ? pendingWait(run) : null;
  const play = () => {
    clearInterval(timer.current);
    setPlaying(true);
    let i = 0;
    setUpTo(0);
    timer.current = setInterval(() => {
      i++;
      if (i >= events.length) {
        clearInterval(timer.current);
        setPlaying(false);
        setUpTo(null);
      } else setUpTo(i);
    }, 80);
  };

  return (
    <div class="inspector">
      <h2>
        Run <code>{jobId}</code>
      </h2>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {job && (
        <p class="meta">
          <span class={`state state-${job.state}`} data-testid="inspector-state">
            {job.state}
          </span>{" "}
          {job.conversation_id && (
            <>
              conversation <a href={`#/chat/${job.conversation_id}`}>{job.conversation_id}</a> ·{" "}
            </>
          )}
          {job.parent_job_id && (
            <>
              delegated by <a href={`#/jobs/${job.parent_job_id}`}>{job.parent_job_id.slice(0, 8)}</a> (depth{" "}
              {job.depth}) ·{" "}
            </>
          )}
          {job.forked_from && (
            <span data-testid="forked-from">
              forked from <a href={`#/jobs/${job.forked_from.job_id}`}>{job.forked_from.job_id.slice(0, 8)}</a>{" "}
              {job.forked_from.step === 0 ? "(a rerun, from its input)" : `after step ${job.forked_from.step}`} ·{" "}
            </span>
          )}
          model {job.model ?? "default"} · tools {job.tools.length ? job.tools.join(", ") : "none"}
          {job && !isFinalState(job.state) && " · live"}
        </p>
      )}
      {job && (job.agent || job.usage.model_calls > 0) && (
        <p class="meta facts" data-testid="inspector-facts">
          <RunFacts job={job} />
        </p>
      )}
      {job && <Budget job={job} />}
      {job && <InputOutput job={job} />}
      {job && <Artifacts job={job} />}
      <Waterfall job={job} events={shown} />
      {job?.waiting_for && (
        <p class="meta" data-testid="waiting-for">
          waiting for {WAITING_FOR[job.waiting_for.kind]} <code>{job.waiting_for.tool}</code> (call{" "}
          <code>{job.waiting_for.call_id}</code>) since {job.waiting_for.since}, until {job.waiting_for.deadline_at},
          then {job.waiting_for.on_deadline}
        </p>
      )}
      {run.children.length > 0 && (
        <section class="children" data-testid="inspector-children">
          <h3>Child jobs</h3>
          <ul>
            {run.children.map((c) => (
              <li key={c.job_id} data-job-id={c.job_id}>
                <a href={`#/jobs/${c.job_id}`}>
                  <code>{c.job_id.slice(0, 8)}</code>
                </a>{" "}
                agent <code>{c.agent}</code> for call <code>{c.call_id}</code>:{" "}
                {c.finished ? (
                  <span class={`state state-${c.finished.state}`}>{c.finished.state}</span>
                ) : (
                  <span class="muted">running</span>
                )}
                {c.finished?.error && (
                  <span class="error"> {`${c.finished.error.code}: ${c.finished.error.message}`}</span>
                )}
              </li>
            ))}
          </ul>
        </section>
      )}
      {wait && <ApprovalCard key={wait.call_id} jobId={jobId} wait={wait} />}
      <div class="toolbar">
        <label for="replay">Replay to event</label>
        <input
          id="replay"
          type="range"
          min={0}
          max={events.length}
          value={upTo ?? events.length}
          onInput={(e) => {
            const v = Number((e.target as HTMLInputElement).value);
            setUpTo(v >= events.length ? null : v);
          }}
        />
        <output for="replay" data-testid="replay-position">
          {shown.length} / {events.length}
        </output>
        <button type="button" onClick={play} disabled={playing || events.length === 0}>
          Play
        </button>
      </div>
      <article class="msg answer" data-testid="inspector-answer">
        <div class="answer-text">
          <AnswerBody turns={run.turns} />
        </div>
        {run.terminal && (
          <footer class="answer-foot">
            <span>{run.terminal.type}</span>
            {run.terminal.error && (
              <span class="error">{`${run.terminal.error.code}: ${run.terminal.error.message}`}</span>
            )}
          </footer>
        )}
        {job && upTo === null && <OutputJson job={job} />}
      </article>
      {job && <Steps job={job} />}
      <DebugPanel job={job} events={shown} />
    </div>
  );
}

/**
 * Schedules (docs/api.md "Schedules"): the tenant's cron schedules with their next and last tick,
 * a form that creates one (the API's 400 naming a bad cron or timezone is shown as it is), and
 * per schedule: enable/disable, delete, and its jobs (GET /v1/jobs?schedule_id=).
 */
import { useEffect, useState } from "preact/hooks";
import type { ScheduleAnswer } from "../../src/client/client";
import { client, type JobView } from "./api";
import { day } from "./list";

type Schedule = ScheduleAnswer["schedule"];

export function Schedules() {
  const [schedules, setSchedules] = useState<Schedule[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [reload, setReload] = useState(0);
  useEffect(() => {
    client
      .listSchedules()
      .then((p) => setSchedules(p.schedules))
      .catch((err) => setError((err as Error).message));
  }, [reload]);
  const act = async (work: Promise<unknown>) => {
    setError(null);
    try {
      await work;
      setReload((n) => n + 1);
    } catch (err) {
      setError((err as Error).message);
    }
  };

  return (
    <div class="schedules">
      <h2>Schedules</h2>
      <NewSchedule onCreated={() => setReload((n) => n + 1)} />
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {!schedules && !error && <p class="muted">loading…</p>}
      {schedules && schedules.length === 0 && <p class="muted">no schedules</p>}
      {schedules && schedules.length > 0 && (
        <div class="scroll">
          <table class="list" data-testid="schedules-table">
            <thead>
              <tr>
                <th scope="col">cron</th>
                <th scope="col">timezone</th>
                <th scope="col">state</th>
                <th scope="col">next tick</th>
                <th scope="col">last tick</th>
                <th scope="col">actions</th>
              </tr>
            </thead>
            <tbody>
              {schedules.map((s) => (
                <tr key={s.id} data-schedule-id={s.id}>
                  <td>
                    <a href={`#/schedules/${s.id}`}>
                      <code>{s.cron}</code>
                    </a>
                  </td>
                  <td>{s.timezone}</td>
                  <td>{s.enabled ? "enabled" : "disabled"}</td>
                  <td>{s.next_run_at ? <time dateTime={s.next_run_at}>{day(s.next_run_at)}</time> : "–"}</td>
                  <td>{s.last_run_at ? <time dateTime={s.last_run_at}>{day(s.last_run_at)}</time> : "–"}</td>
                  <td>
                    <button
                      type="button"
                      onClick={() => void act(client.updateSchedule(s.id, { enabled: !s.enabled }))}
                      aria-label={`${s.enabled ? "Disable" : "Enable"} schedule ${s.cron}`}
                    >
                      {s.enabled ? "Disable" : "Enable"}
                    </button>{" "}
                    <button
                      type="button"
                      class="danger"
                      onClick={() => void act(client.deleteSchedule(s.id))}
                      aria-label={`Delete schedule ${s.cron}`}
                    >
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function NewSchedule({ onCreated }: { onCreated: () => void }) {
  const [cron, setCron] = useState("");
  const [timezone, setTimezone] = useState("UTC");
  const [message, setMessage] = useState("");
  const [catchUp, setCatchUp] = useState<"latest" | "none">("latest");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await client.createSchedule({
        cron,
        timezone,
        catch_up: catchUp,
        input: { messages: [{ role: "user", content: message }] },
      });
      setCron("");
      setMessage("");
      onCreated();
    } catch (err) {
      setError((err as Error).message);
    }
    setBusy(false);
  };
  const text = (v: string, set: (v: string) => void) => ({
    value: v,
    onInput: (e: Event) => set((e.target as HTMLInputElement).value),
  });
  return (
    <form class="agent-form" onSubmit={submit} data-testid="schedule-form" aria-labelledby="schedule-form-head">
      <h3 id="schedule-form-head">New schedule</h3>
      <div class="field-row">
        <div class="field">
          <label for="schedule-cron">Cron</label>
          <input id="schedule-cron" required spellcheck={false} class="mono" {...text(cron, setCron)} />
          <span class="muted hint">5 fields, or 6 with seconds first</span>
        </div>
        <div class="field">
          <label for="schedule-timezone">Timezone</label>
          <input id="schedule-timezone" required spellcheck={false} {...text(timezone, setTimezone)} />
          <span class="muted hint">IANA, e.g. Europe/Berlin</span>
        </div>
        <div class="field">
          <label for="schedule-catch-up">Catch up</label>
          <select
            id="schedule-catch-up"
            value={catchUp}
            onChange={(e) => setCatchUp((e.target as HTMLSelectElement).value as "latest" | "none")}
          >
            <option value="latest">latest (one run for missed ticks)</option>
            <option value="none">none</option>
          </select>
        </div>
      </div>
      <div class="field">
        <label for="schedule-message">Message</label>
        <textarea id="schedule-message" rows={2} required {...text(message, setMessage)} />
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <div class="toolbar">
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Saving…" : "Create schedule"}
        </button>
      </div>
    </form>
  );
}

/** One schedule and the jobs its ticks made. */
export function ScheduleDetail({ id }: { id: string }) {
  const [schedule, setSchedule] = useState<Schedule | null>(null);
  const [jobs, setJobs] = useState<JobView[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    Promise.all([client.getSchedule(id), client.list({ schedule_id: id, limit: 50 })])
      .then(([s, p]) => {
        setSchedule(s.schedule);
        setJobs(p.jobs);
      })
      .catch((err) => setError((err as Error).message));
  }, [id]);
  return (
    <div class="schedule-detail">
      <p>
        <a href="#/schedules">← Schedules</a>
      </p>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {schedule && (
        <h2>
          <code>{schedule.cron}</code> ({schedule.timezone})
        </h2>
      )}
      {jobs && jobs.length === 0 && <p class="muted">no ticks yet</p>}
      {jobs && jobs.length > 0 && (
        <table class="list" data-testid="schedule-jobs">
          <thead>
            <tr>
              <th scope="col">tick</th>
              <th scope="col">job</th>
              <th scope="col">state</th>
            </tr>
          </thead>
          <tbody>
            {jobs.map((j) => (
              <tr key={j.id}>
                <td>{j.scheduled_for ? <time dateTime={j.scheduled_for}>{day(j.scheduled_for)}</time> : "–"}</td>
                <td>
                  <a href={`#/jobs/${j.id}`}>
                    <code>{j.id.slice(0, 8)}</code>
                  </a>
                </td>
                <td>
                  <span class={`state state-${j.state}`}>{j.state}</span>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

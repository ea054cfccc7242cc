/**
 * Schedules (docs/api.md "Schedules"): the tenant's cron schedules with their next and last tick,
 * a form that creates one (the API's 400 naming a bad cron or timezone is shown as it is), and
 * per schedule: enable/disable, delete, and its jobs (GET /v1/jobs?schedule_id=).
 */
import { useState } from "preact/hooks";
import type { ScheduleAnswer } from "../../src/client/client";
import { AgentOptions, useLiveAgents } from "./agent-options";
import { client } from "./api";
import { Field, FormEnd, text, useSubmit } from "./form";
import { JobLink, ListTable, useLoaded, when } from "./list";

type Schedule = ScheduleAnswer["schedule"];

export function Schedules() {
  const { data, error, refresh, act } = useLoaded(() => client.listSchedules(), []);
  return (
    <div class="schedules">
      <h2>Schedules</h2>
      <NewSchedule onCreated={refresh} />
      <ListTable<Schedule>
        items={data?.schedules}
        error={error}
        empty="no schedules"
        testId="schedules-table"
        columns={["cron", "timezone", "agent", "state", "next tick", "last tick", "actions"]}
        row={(s) => (
          <tr key={s.id} data-schedule-id={s.id}>
            <td>
              <a href={`#/schedules/${s.id}`}>
                <code>{s.cron}</code>
              </a>
            </td>
            <td>{s.timezone}</td>
            <td data-testid="schedule-agent">{s.agent ?? "default"}</td>
            <td>{s.enabled ? "enabled" : "disabled"}</td>
            <td>{when(s.next_run_at)}</td>
            <td>{when(s.last_run_at)}</td>
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
        )}
      />
    </div>
  );
}

function NewSchedule({ onCreated }: { onCreated: () => void }) {
  const [cron, setCron] = useState("");
  const [timezone, setTimezone] = useState("UTC");
  const [message, setMessage] = useState("");
  const [catchUp, setCatchUp] = useState<"latest" | "none">("latest");
  const [agent, setAgent] = useState("");
  const agents = useLiveAgents();
  const { busy, error, submit } = useSubmit(async () => {
    await client.createSchedule({
      cron,
      timezone,
      catch_up: catchUp,
      ...(agent ? { agent } : {}),
      input: { messages: [{ role: "user", content: message }] },
    });
    setCron("");
    setMessage("");
    onCreated();
  });
  return (
    <form class="agent-form" onSubmit={submit} data-testid="schedule-form" aria-labelledby="schedule-form-head">
      <h3 id="schedule-form-head">New schedule</h3>
      <div class="field-row">
        <Field id="schedule-cron" label="Cron" hint="5 fields, or 6 with seconds first">
          <input id="schedule-cron" required spellcheck={false} class="mono" {...text(cron, setCron)} />
        </Field>
        <Field id="schedule-timezone" label="Timezone" hint="IANA, e.g. Europe/Berlin">
          <input id="schedule-timezone" required spellcheck={false} {...text(timezone, setTimezone)} />
        </Field>
        {/* The options' words stay short so the select is never cut; what they mean is the hint. */}
        <Field id="schedule-catch-up" label="Catch up" hint="latest: one run for the ticks missed; none: skip them">
          <select
            id="schedule-catch-up"
            value={catchUp}
            onChange={(e) => setCatchUp((e.target as HTMLSelectElement).value as "latest" | "none")}
          >
            <option value="latest">latest</option>
            <option value="none">none</option>
          </select>
        </Field>
        <Field id="schedule-agent" label="Agent" hint="each tick runs its latest version">
          <select id="schedule-agent" value={agent} onChange={(e) => setAgent((e.target as HTMLSelectElement).value)}>
            <AgentOptions agents={agents} chosen={agent} />
          </select>
        </Field>
      </div>
      <Field id="schedule-message" label="Message">
        <textarea id="schedule-message" rows={2} required {...text(message, setMessage)} />
      </Field>
      <FormEnd error={error} busy={busy} label="Create schedule" />
    </form>
  );
}

/** One schedule and the jobs its ticks made. */
export function ScheduleDetail({ id }: { id: string }) {
  const { data, error } = useLoaded(
    () => Promise.all([client.getSchedule(id), client.list({ schedule_id: id, limit: 50 })]),
    [id],
  );
  const schedule = data?.[0].schedule;
  return (
    <div class="schedule-detail">
      <p>
        <a href="#/schedules">← Schedules</a>
      </p>
      {schedule && (
        <h2>
          <code>{schedule.cron}</code> ({schedule.timezone})
        </h2>
      )}
      <ListTable
        items={data?.[1].jobs}
        error={error}
        empty="no ticks yet"
        testId="schedule-jobs"
        columns={["tick", "job", "state"]}
        row={(j) => (
          <tr key={j.id}>
            <td>{when(j.scheduled_for)}</td>
            <td>
              <JobLink id={j.id} />
            </td>
            <td>
              <span class={`state state-${j.state}`}>{j.state}</span>
            </td>
          </tr>
        )}
      />
    </div>
  );
}

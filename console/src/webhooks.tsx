/**
 * Webhooks (docs/api.md "Webhooks"): the tenant's endpoints, a form that adds one and shows its
 * secret this once (the API never shows it again), and per endpoint its deliveries with every
 * attempt and a Retry button (same webhook-id).
 */
import { useState } from "preact/hooks";
import type { WebhookCreated } from "../../src/client/client";
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from "../../src/contracts/webhook-events";
import { client } from "./api";
import { Field, FormEnd, text, useSubmit } from "./form";
import { day, JobLink, ListTable, useLoaded, when } from "./list";

type WebhookRow = Awaited<ReturnType<typeof client.listWebhooks>>["webhooks"][number];

/**
 * The endpoint's health as its view gives it: paused (until when, and why), still failing after a
 * pause (probed one attempt at a time), and deliveries dropped at the tenant's pending cap.
 */
function Health({ webhook: w }: { webhook: WebhookRow }) {
  const parts = [];
  if (w.paused_until) {
    parts.push(
      <span key="paused" class="danger">
        paused until {when(w.paused_until)}: {w.pause_reason}
      </span>,
    );
  } else if (w.consecutive_failures > 0) {
    parts.push(
      <span key="failing">
        {w.consecutive_failures} failed in a row{w.pause_reason ? ` (after a pause: ${w.pause_reason})` : ""}
      </span>,
    );
  }
  if (w.dropped_deliveries > 0) parts.push(<span key="dropped"> {w.dropped_deliveries} dropped</span>);
  return parts.length === 0 ? <span class="muted">ok</span> : <span>{parts}</span>;
}

export function Webhooks() {
  const { data, error, refresh, act } = useLoaded(() => client.listWebhooks(), []);
  const [created, setCreated] = useState<WebhookCreated["webhook"] | null>(null);
  return (
    <div class="webhooks">
      <h2>Webhooks</h2>
      <NewWebhook
        onCreated={(w) => {
          setCreated(w);
          refresh();
        }}
      />
      {created && (
        <div class="notice" role="status" data-testid="webhook-secret">
          <p>
            Signing secret for <code>{created.url}</code>, shown this once:
          </p>
          <p>
            <code class="mono">{created.secret}</code>
          </p>
        </div>
      )}
      <ListTable
        items={data?.webhooks}
        error={error}
        empty="no webhooks"
        testId="webhooks-table"
        columns={["url", "events", "created", "health", "actions"]}
        row={(w) => (
          <tr key={w.id} data-webhook-id={w.id}>
            <td>
              <a href={`#/webhooks/${w.id}`}>
                <code>{w.url}</code>
              </a>
            </td>
            <td>{w.events.join(", ")}</td>
            <td>{when(w.created_at)}</td>
            <td data-testid="webhook-health">
              <Health webhook={w} />
            </td>
            <td>
              <button
                type="button"
                class="danger"
                onClick={() => void act(client.deleteWebhook(w.id))}
                aria-label={`Delete webhook ${w.url}`}
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

function NewWebhook({ onCreated }: { onCreated: (w: WebhookCreated["webhook"]) => void }) {
  const [url, setUrl] = useState("");
  const [events, setEvents] = useState<string[]>(["job.completed", "job.failed"]);
  const { busy, error, submit } = useSubmit(async () => {
    const { webhook } = await client.createWebhook({ url, events: events as WebhookEventType[] });
    setUrl("");
    onCreated(webhook);
  });
  return (
    <form class="agent-form" onSubmit={submit} data-testid="webhook-form" aria-labelledby="webhook-form-head">
      <h3 id="webhook-form-head">New webhook</h3>
      <Field id="webhook-url" label="URL" hint="must be under the operator's WEBHOOK_ALLOWED_URLS">
        <input id="webhook-url" required spellcheck={false} {...text(url, setUrl)} />
      </Field>
      <fieldset class="field">
        <legend>Events</legend>
        {WEBHOOK_EVENT_TYPES.map((t) => (
          <label key={t} class="check">
            <input
              type="checkbox"
              checked={events.includes(t)}
              onChange={(e) =>
                setEvents((e.target as HTMLInputElement).checked ? [...events, t] : events.filter((x) => x !== t))
              }
            />{" "}
            {t}
          </label>
        ))}
      </fieldset>
      <FormEnd error={error} busy={busy} label="Create webhook" disabled={events.length === 0} />
    </form>
  );
}

/** One endpoint's deliveries, newest first, each with its attempts and a Retry button. */
export function WebhookDeliveries({ id }: { id: string }) {
  const { data, error, refresh, act } = useLoaded(
    () => Promise.all([client.getWebhook(id), client.listWebhookDeliveries(id, { limit: 50 })]),
    [id],
  );
  const webhook = data?.[0].webhook;
  return (
    <div class="webhook-deliveries">
      <p>
        <a href="#/webhooks">← Webhooks</a>
      </p>
      {webhook && (
        <h2>
          Deliveries to <code>{webhook.url}</code>
        </h2>
      )}
      <div class="toolbar">
        <button type="button" onClick={refresh}>
          Refresh
        </button>
      </div>
      <ListTable
        items={data?.[1].deliveries}
        error={error}
        empty="no deliveries yet"
        testId="deliveries-table"
        columns={["event", "job", "state", "attempts", "actions"]}
        row={(d) => (
          <tr key={d.id} data-delivery-id={d.id} data-state={d.state}>
            <td>
              {d.event_type}
              <br />
              <time class="muted" dateTime={d.created_at}>
                {day(d.created_at)}
              </time>
            </td>
            <td>
              <JobLink id={d.job_id} />
            </td>
            <td>{d.state}</td>
            <td>
              <ol class="attempts">
                {d.attempts.map((a) => (
                  <li key={a.attempted_at} data-testid="attempt">
                    <time dateTime={a.attempted_at}>{day(a.attempted_at)}</time> {a.status_code ?? "no answer"}{" "}
                    {a.error ? `(${a.error})` : ""} {a.duration_ms} ms
                  </li>
                ))}
              </ol>
            </td>
            <td>
              <button
                type="button"
                onClick={() => void act(client.retryWebhookDelivery(id, d.id))}
                aria-label={`Retry delivery ${d.id}`}
              >
                Retry
              </button>
            </td>
          </tr>
        )}
      />
    </div>
  );
}

/**
 * Webhooks (docs/api.md "Webhooks"): the tenant's endpoints, a form that adds one and shows its
 * secret this once (the API never shows it again), and per endpoint its deliveries with every
 * attempt and a Retry button (same webhook-id).
 */
import { useEffect, useState } from "preact/hooks";
import type { DeliveryPage, WebhookCreated, WebhookPage } from "../../src/client/client";
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from "../../src/contracts/webhook-events";
import { client } from "./api";
import { day } from "./list";

type Webhook = WebhookPage["webhooks"][number];
type Delivery = DeliveryPage["deliveries"][number];

export function Webhooks() {
  const [webhooks, setWebhooks] = useState<Webhook[] | null>(null);
  const [created, setCreated] = useState<WebhookCreated["webhook"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [reload, setReload] = useState(0);
  useEffect(() => {
    client
      .listWebhooks()
      .then((p) => setWebhooks(p.webhooks))
      .catch((err) => setError((err as Error).message));
  }, [reload]);
  const remove = async (id: string) => {
    setError(null);
    try {
      await client.deleteWebhook(id);
      setReload((n) => n + 1);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <div class="webhooks">
      <h2>Webhooks</h2>
      <NewWebhook
        onCreated={(w) => {
          setCreated(w);
          setReload((n) => n + 1);
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
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {!webhooks && !error && <p class="muted">loading…</p>}
      {webhooks && webhooks.length === 0 && <p class="muted">no webhooks</p>}
      {webhooks && webhooks.length > 0 && (
        <div class="scroll">
          <table class="list" data-testid="webhooks-table">
            <thead>
              <tr>
                <th scope="col">url</th>
                <th scope="col">events</th>
                <th scope="col">created</th>
                <th scope="col">actions</th>
              </tr>
            </thead>
            <tbody>
              {webhooks.map((w) => (
                <tr key={w.id} data-webhook-id={w.id}>
                  <td>
                    <a href={`#/webhooks/${w.id}`}>
                      <code>{w.url}</code>
                    </a>
                  </td>
                  <td>{w.events.join(", ")}</td>
                  <td>
                    <time dateTime={w.created_at}>{day(w.created_at)}</time>
                  </td>
                  <td>
                    <button
                      type="button"
                      class="danger"
                      onClick={() => void remove(w.id)}
                      aria-label={`Delete webhook ${w.url}`}
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

function NewWebhook({ onCreated }: { onCreated: (w: WebhookCreated["webhook"]) => void }) {
  const [url, setUrl] = useState("");
  const [events, setEvents] = useState<string[]>(["job.completed", "job.failed"]);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const { webhook } = await client.createWebhook({
        url,
        events: events as WebhookEventType[],
      });
      setUrl("");
      onCreated(webhook);
    } catch (err) {
      setError((err as Error).message);
    }
    setBusy(false);
  };
  return (
    <form class="agent-form" onSubmit={submit} data-testid="webhook-form" aria-labelledby="webhook-form-head">
      <h3 id="webhook-form-head">New webhook</h3>
      <div class="field">
        <label for="webhook-url">URL</label>
        <input
          id="webhook-url"
          required
          spellcheck={false}
          value={url}
          onInput={(e) => setUrl((e.target as HTMLInputElement).value)}
        />
        <span class="muted hint">must be under the operator's WEBHOOK_ALLOWED_URLS</span>
      </div>
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
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <div class="toolbar">
        <button type="submit" class="primary" disabled={busy || events.length === 0}>
          {busy ? "Saving…" : "Create webhook"}
        </button>
      </div>
    </form>
  );
}

/** One endpoint's deliveries, newest first, each with its attempts and a Retry button. */
export function WebhookDeliveries({ id }: { id: string }) {
  const [webhook, setWebhook] = useState<Webhook | null>(null);
  const [deliveries, setDeliveries] = useState<Delivery[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [reload, setReload] = useState(0);
  useEffect(() => {
    Promise.all([client.getWebhook(id), client.listWebhookDeliveries(id, { limit: 50 })])
      .then(([w, d]) => {
        setWebhook(w.webhook);
        setDeliveries(d.deliveries);
      })
      .catch((err) => setError((err as Error).message));
  }, [id, reload]);
  const retry = async (deliveryId: string) => {
    setError(null);
    try {
      await client.retryWebhookDelivery(id, deliveryId);
      setReload((n) => n + 1);
    } catch (err) {
      setError((err as Error).message);
    }
  };
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
        <button type="button" onClick={() => setReload((n) => n + 1)}>
          Refresh
        </button>
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {deliveries && deliveries.length === 0 && <p class="muted">no deliveries yet</p>}
      {deliveries && deliveries.length > 0 && (
        <div class="scroll">
          <table class="list" data-testid="deliveries-table">
            <thead>
              <tr>
                <th scope="col">event</th>
                <th scope="col">job</th>
                <th scope="col">state</th>
                <th scope="col">attempts</th>
                <th scope="col">actions</th>
              </tr>
            </thead>
            <tbody>
              {deliveries.map((d) => (
                <tr key={d.id} data-delivery-id={d.id} data-state={d.state}>
                  <td>
                    {d.event_type}
                    <br />
                    <time class="muted" dateTime={d.created_at}>
                      {day(d.created_at)}
                    </time>
                  </td>
                  <td>
                    <a href={`#/jobs/${d.job_id}`}>
                      <code>{d.job_id.slice(0, 8)}</code>
                    </a>
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
                    <button type="button" onClick={() => void retry(d.id)} aria-label={`Retry delivery ${d.id}`}>
                      Retry
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

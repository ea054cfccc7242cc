/**
 * What the console's forms share: a submit that is busy while it runs and shows the API's error
 * (a 400 names the field at fault, docs/api.md "Errors"), labelled fields, and the submit bar.
 */
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { Alert, errorText } from "./list";

/**
 * A form's submit handler: `work` posts the form (and resets its fields); until it settles the
 * form is busy, and what it throws is the form's error. A check before posting can throw too.
 */
export function useSubmit(work: () => Promise<void>) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await work();
    } catch (err) {
      setError(errorText(err));
    }
    setBusy(false);
  };
  return { busy, error, setError, submit };
}

/** A text input's or textarea's value and its handler, for `{...text(v, setV)}`. */
export const text = (v: string, set: (v: string) => void) => ({
  value: v,
  onInput: (e: Event) => set((e.target as HTMLInputElement).value),
});

/** A labelled field: `id` is the control's, so the label names it; `hint` goes under it. */
export function Field({
  id,
  label,
  hint,
  children,
}: {
  id: string;
  label: string;
  hint?: string;
  children: ComponentChildren;
}) {
  return (
    <div class="field">
      <label for={id}>{label}</label>
      {children}
      {hint && <span class="muted hint">{hint}</span>}
    </div>
  );
}

/** The end of a form: its error, then the submit button ("Saving…" while busy) and any other buttons. */
export function FormEnd({
  error,
  busy,
  label,
  disabled = false,
  children,
}: {
  error: string | null;
  busy: boolean;
  label: string;
  disabled?: boolean;
  children?: ComponentChildren;
}) {
  return (
    <>
      <Alert error={error} />
      <div class="toolbar">
        <button type="submit" class="primary" disabled={busy || disabled}>
          {busy ? "Saving…" : label}
        </button>
        {children}
      </div>
    </>
  );
}

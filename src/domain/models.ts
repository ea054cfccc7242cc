/**
 * Which models a deployment offers. The client's `model` string reaches the provider and names a
 * quota bucket, so it must be one the operator chose: any other string would get a quota bucket
 * of its own (sidestepping the per-model limit) and whatever the provider makes of it.
 *
 * Today a model is its public name, which is also the provider's id. The list is parsed into
 * entries rather than bare strings so a later registry (public name → provider, upstream id,
 * limits) can add fields here without changing the callers.
 */

export interface ModelEntry {
  /** What clients send as `model` and what the quota key is built from. */
  name: string;
}

export interface ModelCatalog {
  /** In the operator's order; the first is the default. Empty: no choice offered. */
  entries: readonly ModelEntry[];
}

const MODEL_NAME_RE = /^[A-Za-z0-9._:/@-]{1,200}$/;

/**
 * `MODELS` as the operator writes it: names separated by commas, the first one the default.
 * Returns the problem as a string instead of throwing, so each process can name its variable.
 */
export function parseModelList(raw: string | undefined): ModelCatalog | string {
  if (raw === undefined || raw.trim() === "") return { entries: [] };
  const names = raw.split(",").map((s) => s.trim());
  const bad = names.find((n) => !MODEL_NAME_RE.test(n));
  if (bad !== undefined) {
    return bad === ""
      ? "an empty name (two commas in a row, or a trailing comma)"
      : `"${bad}" is not a model name (letters, digits and . _ : / @ -, at most 200)`;
  }
  const seen = new Set<string>();
  const entries: ModelEntry[] = [];
  for (const name of names) {
    if (seen.has(name)) return `"${name}" is listed twice`;
    seen.add(name);
    entries.push({ name });
  }
  return { entries };
}

/** The entry a job runs on: the one it names, or the default when it names none; null if not offered. */
export function resolveModel(catalog: ModelCatalog, requested: string | null | undefined): ModelEntry | null {
  if (requested === null || requested === undefined) return catalog.entries[0] ?? null;
  return catalog.entries.find((e) => e.name === requested) ?? null;
}

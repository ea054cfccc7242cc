/** Reading a host's /metrics text in tests. */

/** Sample lines of one metric: labels → value. */
export async function samples(metricsUrl: string, name: string): Promise<Array<{ labels: string; value: number }>> {
  const text = await (await fetch(metricsUrl)).text();
  return text
    .split("\n")
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .map((l) => ({ labels: l.slice(0, l.lastIndexOf(" ")), value: Number(l.slice(l.lastIndexOf(" ") + 1)) }));
}

/** The value of the one sample whose labels include every `key="value"` given (undefined: none). */
export async function sampleValue(
  metricsUrl: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number | undefined> {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return (await samples(metricsUrl, name)).find((s) => want.every((w) => s.labels.includes(w)))?.value;
}

/**
 * `npm run demo -- "your message"`: submit one job to the running dev stack and stream it.
 * Prints the model's text as it arrives, then the job's final state and latency facts.
 */
import { readFile } from "node:fs/promises";
import { readSse } from "./lib/sse";

const message = process.argv.slice(2).join(" ") || "hello";
try {
  const stack = JSON.parse(await readFile(".dev/stack.json", "utf8")) as { gateway_url: string; api_key: string };
  const headers = { authorization: `Bearer ${stack.api_key}`, "content-type": "application/json" };
  const t0 = performance.now();
  const res = await fetch(`${stack.gateway_url}/v1/jobs`, {
    method: "POST",
    headers,
    body: JSON.stringify({ input: { messages: [{ role: "user", content: message }] } }),
  });
  const body = (await res.json()) as { job?: { id: string }; error?: { message: string } };
  if (!res.ok || !body.job) throw new Error(`submit failed (${res.status}): ${body.error?.message ?? "?"}`);
  const jobId = body.job.id;
  console.error(`job ${jobId} submitted in ${(performance.now() - t0).toFixed(0)} ms; streaming…`);
  for await (const ev of readSse(`${stack.gateway_url}/v1/jobs/${jobId}/events`, { headers })) {
    const envelope = JSON.parse(ev.data) as { payload: { text?: string } };
    if (ev.event === "model.delta") process.stdout.write(envelope.payload.text ?? "");
    else console.error(`\n[${ev.id}] ${ev.event}`);
  }
  const final = (await (await fetch(`${stack.gateway_url}/v1/jobs/${jobId}`, { headers })).json()) as {
    job: { state: string; latency: Record<string, number | null> };
  };
  console.error(`state: ${final.job.state}\nlatency: ${JSON.stringify(final.job.latency)}`);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  if ((err as NodeJS.ErrnoException).code === "ENOENT") console.error("start the stack first: npm run dev");
  process.exit(1);
}

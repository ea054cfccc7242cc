/**
 * `npm run demo -- "your message"`: submit one job to the running dev stack and stream it.
 * Prints the model's text as it arrives, then the job's final state and latency facts. It uses
 * the typed client (src/client/), so a dropped stream resumes where it stopped.
 */
import { readFile } from "node:fs/promises";
import { EarClient } from "../src/client/client";

const message = process.argv.slice(2).join(" ") || "hello";
try {
  const stack = JSON.parse(await readFile(".dev/stack.json", "utf8")) as { gateway_url: string; api_key: string };
  const api = new EarClient({ baseUrl: stack.gateway_url, credential: stack.api_key });
  const t0 = performance.now();
  const { job } = await api.submit({ input: { messages: [{ role: "user", content: message }] } });
  console.error(`job ${job.id} submitted in ${(performance.now() - t0).toFixed(0)} ms; streaming…`);
  for await (const { id, event } of api.events(job.id)) {
    if (event.type === "model.delta") process.stdout.write(event.payload.text);
    else console.error(`\n[${id}] ${event.type}`);
  }
  const final = await api.get(job.id);
  console.error(`state: ${final.state}\nlatency: ${JSON.stringify(final.latency)}`);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  if ((err as NodeJS.ErrnoException).code === "ENOENT") console.error("start the stack first: npm run dev");
  process.exit(1);
}

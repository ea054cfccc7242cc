/**
 * `npm run demo -- [--agent NAME[@N]] "your message"`: submit one job to the running dev stack
 * (run by that agent, defined with POST /v1/agents, else the built-in default agent) and stream
 * it. Prints the model's text as it arrives, then the job's final state, agent, usage and
 * latency. It uses the typed client (src/client/), so a dropped stream resumes where it stopped.
 * When the run stops for a person (a tool that requires approval, or the model's question), it
 * prints the commands that approve, deny or answer, and goes on streaming once one is sent: the
 * job is `waiting` and its stream stays open, which looked like a hang.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { EarClient } from "../../src/client/client";
import { waitingHelp } from "./demo-help";

const { values, positionals } = parseArgs({ options: { agent: { type: "string" } }, allowPositionals: true });
const message = positionals.join(" ") || "hello";
const stackFile = join(process.env.DEV_DIR || ".dev", "stack.json");
try {
  const stack = JSON.parse(await readFile(stackFile, "utf8")) as { gateway_url: string; api_key: string };
  const api = new EarClient({ baseUrl: stack.gateway_url, credential: stack.api_key });
  const t0 = performance.now();
  const { job } = await api.submit({
    input: { messages: [{ role: "user", content: message }] },
    ...(values.agent ? { agent: values.agent } : {}),
  });
  console.error(`job ${job.id} submitted in ${(performance.now() - t0).toFixed(0)} ms; streaming…`);
  for await (const { id, event } of api.events(job.id)) {
    if (event.type === "model.delta") process.stdout.write(event.payload.text);
    else console.error(`\n[${id}] ${event.type}`);
    const help = waitingHelp(job.id, event as Parameters<typeof waitingHelp>[1], stackFile);
    if (help) console.error(help);
  }
  const { job: final } = await api.get(job.id);
  console.error(`state: ${final.state}\nagent: ${JSON.stringify(final.agent)}`);
  if (final.output_json !== null) console.error(`output_json: ${JSON.stringify(final.output_json)}`);
  console.error(`usage: ${JSON.stringify(final.usage)}\nlatency: ${JSON.stringify(final.latency)}`);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  if ((err as NodeJS.ErrnoException).code === "ENOENT") console.error("start the stack first: npm run dev");
  process.exit(1);
}

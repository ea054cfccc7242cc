/**
 * `npm run demo -- [--agent NAME[@N]] "your message"`: submit one job to the running dev stack
 * (run by that agent, defined with POST /v1/agents, else the built-in default agent) and stream
 * it. Prints the model's text as it arrives, then the job's final state, agent, usage and latency.
 */
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { readSse } from "./lib/sse";

const { values, positionals } = parseArgs({ options: { agent: { type: "string" } }, allowPositionals: true });
const message = positionals.join(" ") || "hello";
try {
  const stack = JSON.parse(await readFile(".dev/stack.json", "utf8")) as { gateway_url: string; api_key: string };
  const headers = { authorization: `Bearer ${stack.api_key}`, "content-type": "application/json" };
  const t0 = performance.now();
  const res = await fetch(`${stack.gateway_url}/v1/jobs`, {
    method: "POST",
    headers,
    body: JSON.stringify({
      input: { messages: [{ role: "user", content: message }] },
      ...(values.agent ? { agent: values.agent } : {}),
    }),
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
    job: {
      state: string;
      latency: Record<string, number | null>;
      agent: unknown;
      usage: unknown;
      output_json: unknown;
    };
  };
  console.error(`state: ${final.job.state}\nagent: ${JSON.stringify(final.job.agent)}`);
  if (final.job.output_json !== null) console.error(`output_json: ${JSON.stringify(final.job.output_json)}`);
  console.error(`usage: ${JSON.stringify(final.job.usage)}\nlatency: ${JSON.stringify(final.job.latency)}`);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  if ((err as NodeJS.ErrnoException).code === "ENOENT") console.error("start the stack first: npm run dev");
  process.exit(1);
}

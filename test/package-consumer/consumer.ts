/**
 * A consumer of the package's exports, by name (a self-reference: this file is inside the
 * package), typechecked by test/integration/package-exports.test.ts against the built
 * declarations. The `@ts-expect-error` lines fail the check if the exports' types were missing
 * (an untyped import is `any`, and then nothing is an error).
 */
import type { ChatTransport } from "ai";
import { defineAgent } from "edge-agent-runtime/agents";
import { EarChatTransport, type EarUIMessage } from "edge-agent-runtime/ai-sdk";
import { ApiClientError, EarClient as BackendClient } from "edge-agent-runtime/client";
import { EarClient, type JobRun, useJob, useJobTree } from "edge-agent-runtime/react";
import { defineTool, type ToolContext } from "edge-agent-runtime/tools";
import { z } from "zod";

export const transport: ChatTransport<EarUIMessage> = new EarChatTransport({
  baseUrl: "https://api.example.com",
  credential: async () => "a.b.c",
  busy: "interrupt",
});
// @ts-expect-error a busy policy is queue, reject or interrupt
new EarChatTransport({ baseUrl: "https://api.example.com", credential: "a.b.c", busy: "sometimes" });

export function useLatency(id: string): number | null {
  const run: JobRun = useJob(id, { client: new EarClient({ baseUrl: "https://api.example.com" }) });
  useJobTree(id);
  // @ts-expect-error latency is an object of milliseconds, not a number
  const wrong: number = run.latency;
  void wrong;
  return run.latency?.total_latency_ms ?? null;
}

export const answerState = (m: EarUIMessage) => m.metadata?.state;

// The client entry is the same EarClient the React entry re-exports.
export const backend: EarClient = new BackendClient({ baseUrl: "https://api.example.com", credential: "ear_x" });
export const notFound = (e: unknown) => e instanceof ApiClientError && e.status === 404;

// A code tool's args are the zod schema's output, and ctx carries the run's identity.
export const lookup = defineTool({
  name: "lookup_order",
  description: "Find an order by id",
  input: z.object({ id: z.string(), verbose: z.boolean().default(false) }),
  idempotent: true,
  run: async (args, ctx: ToolContext) => {
    const verbose: boolean = args.verbose;
    // @ts-expect-error the schema has no field `total`
    void args.total;
    return { id: args.id, verbose, key: ctx.idempotency_key, epoch: ctx.epoch + 1 };
  },
});
// @ts-expect-error run is required
defineTool({ name: "x", description: "d", input: { type: "object" } });

// An agent as code: the API's fields, typed.
export const support = defineAgent({ name: "support", model: "m", tools: ["lookup_order"], limits: { max_turns: 4 } });
// @ts-expect-error max_turns is a number
defineAgent({ name: "x", model: "m", limits: { max_turns: "many" } });

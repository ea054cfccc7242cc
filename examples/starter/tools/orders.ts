/**
 * The team's code tools, run by the hosts (HOST_TOOLS): `ear tools build tools/orders.ts` bundles
 * this module, its imports included, into the one file a production host loads. A tool's `run`
 * runs on a host's tool thread, never in the page.
 */
import { defineTool } from "edge-agent-runtime/tools";
import { z } from "zod";

/** A stand-in for the team's order store. */
const ORDERS: Record<string, { status: string; total_usd: number }> = {
  "o-1": { status: "shipped", total_usd: 42.5 },
  "o-2": { status: "processing", total_usd: 310 },
};

export const lookupOrder = defineTool({
  name: "lookup_order",
  description: "Find an order by its id: its status and total",
  input: z.object({ id: z.string().describe("The order id, e.g. o-1") }),
  idempotent: true,
  run: async ({ id }) => {
    const order = ORDERS[id];
    return order ? { id, ...order } : { id, error: "no such order" };
  },
});

/** Money leaves the company: a person (or the backend's policy) approves each call first. */
export const refundOrder = defineTool({
  name: "refund_order",
  description: "Refund an order in full",
  input: z.object({ id: z.string(), reason: z.string() }),
  requires_approval: true,
  run: async ({ id, reason }, ctx) => {
    ctx.log.info(`refund ${id}: ${reason}`);
    return { id, refunded: true, key: ctx.idempotency_key };
  },
});

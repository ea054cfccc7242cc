/**
 * The example's code tools (README, "Your own tools in TypeScript"): an order lookup and a
 * refund request over an in-memory store, as a team would write them against its own service.
 * A host loads this module when HOST_TOOLS names it, and runs every call on a worker thread.
 */
import { defineTool } from "edge-agent-runtime/tools";
import { z } from "zod";

interface Order {
  id: string;
  customer: string;
  status: "processing" | "shipped" | "delivered";
  items: Array<{ sku: string; qty: number }>;
  total_cents: number;
}

// Each tool thread loads its own copy of this module: state here is per thread, as a cache
// would be. A real store is a database or a service the tool calls.
const ORDERS = new Map<string, Order>([
  ["A-1001", { id: "A-1001", customer: "ada", status: "shipped", items: [{ sku: "KB-2", qty: 1 }], total_cents: 8900 }],
  [
    "A-1002",
    { id: "A-1002", customer: "lin", status: "processing", items: [{ sku: "MS-7", qty: 2 }], total_cents: 5800 },
  ],
]);
const refunds = new Map<string, { order_id: string; reason: string }>();

export const lookupOrder = defineTool({
  name: "lookup_order",
  description: "Find an order by its id (like A-1001): its status, items and total.",
  input: z.object({
    id: z
      .string()
      .regex(/^A-\d{4}$/)
      .describe("The order id, e.g. A-1001"),
  }),
  idempotent: true,
  timeout_ms: 5000,
  run: async ({ id }, ctx) => {
    ctx.log.info("order lookup", { order_id: id });
    return ORDERS.get(id) ?? { error: `no order ${id}` };
  },
});

export const requestRefund = defineTool({
  name: "request_refund",
  description: "Ask for a refund of an order. A person approves each request before it is made.",
  input: z.object({ id: z.string(), reason: z.string().min(3) }),
  // The same call repeated (a retried run) files one refund: keyed by ctx.idempotency_key.
  idempotent: true,
  requires_approval: true,
  run: async ({ id, reason }, ctx) => {
    if (!ORDERS.has(id)) return { error: `no order ${id}` };
    refunds.set(ctx.idempotency_key, { order_id: id, reason });
    return { refund_requested: id, reference: ctx.idempotency_key };
  },
});

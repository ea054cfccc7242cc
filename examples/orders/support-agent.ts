/**
 * The example's agent as code (README, "Your own tools in TypeScript"):
 * `npm run cli -- agents deploy examples/orders` makes it the tenant's agent `orders`, and again
 * only when this definition changes.
 */
import { defineAgent } from "edge-agent-runtime/agents";

export const orders = defineAgent({
  name: "orders",
  model: "mock-model",
  description: "Answers questions about orders",
  instructions: "You help customers with their orders. Look an order up before you answer about it.",
  tools: ["lookup_order", "request_refund"],
  limits: { max_turns: 4 },
});

/**
 * The team's agent as code: deployed to the gateway by `ear agents deploy agents`, which makes a
 * new version only when this definition changed. EAR_MODEL names a model the gateway offers
 * (GET /v1/models).
 */
import { defineAgent } from "edge-agent-runtime/agents";

export const support = defineAgent({
  name: "starter-support",
  model: process.env.EAR_MODEL ?? "gpt-4.1-mini",
  instructions: "You answer questions about orders. Look an order up before you say anything about it.",
  tools: ["lookup_order", "refund_order"],
  limits: { max_turns: 6 },
});

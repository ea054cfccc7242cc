/**
 * One ModelClient in front of every provider a host uses: a turn names the registry's public
 * model name, and goes to the client of the provider serving it, with that provider's own model
 * id. One OpenAI-compatible client per provider, so several providers are in use at once.
 */

import { createOpenAICompatibleClient } from "./openai-compatible";
import type { HostModels } from "./provider-config";
import type { ModelClient } from "./types";

export function createModelRouter(
  models: HostModels,
  makeClient: (cfg: Parameters<typeof createOpenAICompatibleClient>[0]) => ModelClient = createOpenAICompatibleClient,
): ModelClient {
  const routes = new Map<string, { client: ModelClient; upstream: string }>();
  for (const provider of models.providers) {
    const first = provider.upstream.values().next().value;
    if (first === undefined) continue;
    const client = makeClient({ ...provider.config, model: first });
    for (const [name, upstream] of provider.upstream) routes.set(name, { client, upstream });
  }
  const defaultName = models.catalog.entries[0]?.name;
  return {
    streamTurn(req) {
      const name = req.model ?? defaultName;
      const route = name === undefined ? undefined : routes.get(name);
      // The run resolves its model against the same catalog first: a miss here is a bug.
      if (!route) throw new Error(`no provider serves model "${name}" on this host`);
      return route.client.streamTurn({ ...req, model: route.upstream });
    },
  };
}

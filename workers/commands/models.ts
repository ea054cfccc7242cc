/**
 * Which models a tenant may name: the operator's registry (MODEL_REGISTRY, or the older MODELS
 * list) narrowed by each entry's tenant allow-list. A job's `model`, an agent's `model` and
 * GET /v1/models all go through here, so a model hidden from a tenant is also refused to it.
 */
import { ApiError } from "../../src/contracts/errors";
import { type ModelCatalog, type ModelEntry, modelAllowedFor } from "../../src/domain/models";

/** The entries `tenantId` may use, in the operator's order (the deployment's default first). */
export function modelsFor(models: ModelCatalog, tenantId: string): ModelEntry[] {
  return models.entries.filter((e) => modelAllowedFor(e, tenantId));
}

/**
 * `model` must be one the operator offers this tenant: it reaches the provider and names a quota
 * key. `field` names where the client gave it (`model`, or an agent's definition).
 */
export function assertModelOffered(models: ModelCatalog, tenantId: string, model: string, field = "model"): void {
  const offered = modelsFor(models, tenantId).map((e) => e.name);
  if (offered.includes(model)) return;
  throw new ApiError(
    "invalid_request",
    offered.length === 0
      ? `${field}: "${model}" is not offered: this deployment offers no choice of model`
      : `${field}: "${model}" is not offered; must be one of ${offered.join(", ")} (GET /v1/models)`,
  );
}

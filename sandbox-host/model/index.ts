export { type ModelConfig, ModelConfigError, modelCatalogFromEnv, modelConfigFromEnv } from "./config";
export { createOpenAICompatibleClient } from "./openai-compatible";
export type {
  ModelChunk,
  ModelClient,
  ModelErrorCode,
  ModelMessage,
  ModelToolCall,
  ModelToolSpec,
  ModelTurnRequest,
} from "./types";
export { ModelError } from "./types";

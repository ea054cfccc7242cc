export { connectDocker, type Docker, type DockerConnectOptions } from "./docker";
export { isRunFatal, SandboxError, type SandboxErrorCode, SandboxPoolExhausted } from "./errors";
export type { DirEntry, ListDirResult, ReadFileResult, WriteFileResult } from "./files";
export { workspacePath } from "./files";
export { createKeyedLock, createSemaphore, type KeyedLock, noKeyedLock } from "./keyed-lock";
export {
  createSandboxManager,
  DEFAULT_POOL,
  type DestroyResult,
  type ExecRequest,
  type ExecResult,
  LABEL_HOST,
  LABEL_RUN,
  LABEL_SANDBOX,
  type Sandbox,
  type SandboxManager,
  type SandboxManagerOptions,
} from "./manager";
export { CORE_PROFILE, resolveProfile, type SandboxProfile, WORKSPACE } from "./profile";
export {
  callSandboxTool,
  isSandboxTool,
  SANDBOX_TOOL_SPECS,
  type SandboxToolName,
  type ToolResult,
  toolResultContent,
} from "./tools";

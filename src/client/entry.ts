/**
 * `edge-agent-runtime/client`: the typed client of the public API (EarClient), its event and
 * answer types and its error class, for any runtime with fetch (a Node backend, a Worker, a
 * page). No React and no AI SDK: a backend that mints page tokens or decides approvals installs
 * only this entry's two small dependencies (zod's types and eventsource-parser).
 *
 * Re-exports only, as a package entry is: the public surface in one place for the package build
 * (tools/build/packages.ts). Code in this repository imports the defining files instead (the
 * import-style rule of test/unit/layering.test.ts), so nothing here loads it but the build.
 */
export { TOKEN_SCOPES, type TokenScope } from "../contracts/access";
export type { ErrorCode } from "../contracts/errors";
export type { JobState, JobView } from "../contracts/job";
export type { CreateTokenBody, TokenAnswer } from "../contracts/tokens";
export type { TreeNode } from "../contracts/tree";
export type { ApprovalAnswer, ApprovalBody } from "../contracts/wait";
export type { ChatConnection, ChatOptions, ChatStatus, WebSocketConstructor, WebSocketLike } from "./chat";
export * from "./client";
export type {
  EventEnvelope,
  EventOf,
  EventPayload,
  FollowOptions,
  ModelTurnReason,
  StreamedEvent,
  TreeFollowOptions,
  TreeStreamedEvent,
} from "./events";
export { ApiClientError, type Credential } from "./http";

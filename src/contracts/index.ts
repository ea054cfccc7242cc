export * from "./errors";
export * from "./events";
export * from "./job";
export * from "./job-state";
export * from "./limits";
export * from "./text";

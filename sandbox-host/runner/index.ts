export * from "./run-job";
export * from "./runner";

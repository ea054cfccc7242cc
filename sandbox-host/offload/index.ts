export * from "./errors";
export * from "./pool";

export * from "./errors";
export * from "./events";
export * from "./job";
export * from "./text";

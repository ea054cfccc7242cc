export * from "./metrics";
export * from "./server";

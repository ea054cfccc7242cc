export * from "./breaker";
export * from "./errors";
export * from "./lease-store";
export * from "./scripts";
export * from "./wait";

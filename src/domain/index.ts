export * from "./api-keys";
export * from "./backoff";
export * from "./models";
export * from "./request-hash";
export * from "./signing";
export * from "./timing";
export * from "./uuid";

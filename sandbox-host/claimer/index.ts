export * from "./claimer";

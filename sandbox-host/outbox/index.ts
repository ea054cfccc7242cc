export * from "./outbox";

export { type PeriodicOptions, PeriodicTask } from "./periodic";
export { type Service, type StartedServices, startInOrder } from "./service";

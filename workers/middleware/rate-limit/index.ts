export { BREAKER_OPEN_MS, CHECK_TIMEOUT_MS, rateLimit } from "./rate-limit";

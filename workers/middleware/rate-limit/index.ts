export { CHECK_TIMEOUT_MS, rateLimit } from "./rate-limit";

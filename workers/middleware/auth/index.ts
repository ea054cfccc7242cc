export { apiKeyAuth } from "./auth";

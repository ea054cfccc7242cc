export { errorResponse, handleError, handleNotFound } from "./errors";

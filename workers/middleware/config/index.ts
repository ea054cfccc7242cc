export { withConfig } from "./config";

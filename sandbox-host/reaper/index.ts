export { Reaper, type ReaperOptions } from "./reaper";

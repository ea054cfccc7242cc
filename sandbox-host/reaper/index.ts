export { Reaper, type ReaperOptions } from "./reaper";
export { SandboxJanitor, type SandboxJanitorOptions } from "./sandbox-janitor";

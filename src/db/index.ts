export * from "./client";
export * from "./control-repo";
export * from "./job-view";
export * from "./jobs-repo";
export * from "./ownership-repo";
export * from "./queue-depth-repo";
export * as schema from "./schema";
export * from "./tenants-repo";

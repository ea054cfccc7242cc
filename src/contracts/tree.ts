/**
 * GET /v1/jobs/{id}/tree: a job and every descendant its delegate calls created, nested, each
 * with its state, its timing facts and its usage, plus the usage summed over its subtree (what
 * the whole delegation cost, down from that node).
 */
import { z } from "zod";
import { JOB_STATES } from "./job-state";

export const TreeUsageSchema = z.object({
  prompt_tokens: z.number().int().min(0),
  completion_tokens: z.number().int().min(0),
  model_calls: z.number().int().min(0),
  /** US dollars; null when no call counted here was priced. */
  cost_usd: z.number().min(0).nullable(),
});
export type TreeUsage = z.infer<typeof TreeUsageSchema>;

export interface TreeNode {
  id: string;
  agent: string | null;
  state: (typeof JOB_STATES)[number];
  depth: number;
  parent_job_id: string | null;
  /** The parent's delegate call this job answers (null for the root of the request). */
  parent_call_id: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  /** This job's own model usage. */
  usage: TreeUsage;
  /** This job's usage plus every descendant's. */
  subtree_usage: TreeUsage;
  children: TreeNode[];
}

export const TreeNodeSchema: z.ZodType<TreeNode> = z.lazy(() =>
  z.object({
    id: z.string(),
    agent: z.string().nullable(),
    state: z.enum(JOB_STATES),
    depth: z.number().int().min(0),
    parent_job_id: z.string().nullable(),
    parent_call_id: z.string().nullable(),
    created_at: z.iso.datetime(),
    started_at: z.iso.datetime().nullable(),
    finished_at: z.iso.datetime().nullable(),
    usage: TreeUsageSchema,
    subtree_usage: TreeUsageSchema,
    children: z.array(TreeNodeSchema),
  }),
);

export const JobTreeSchema = z.object({ tree: TreeNodeSchema });

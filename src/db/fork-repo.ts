/**
 * Steps and forks (docs/architecture.md, "Forks"): a job's journal read as steps, and what a fork
 * needs to know about its source's prefix before the fork's row is inserted. Every statement here
 * only reads the source's journal; the copy of the prefix into the fork's own journal is part of
 * the fork's insert (jobs-repo.ts createJob, `fork`), one statement with the row.
 */
import { sql } from "drizzle-orm";
import { STEP_SUMMARY_CHARS, type StepView } from "../contracts/fork";
import type { Db } from "./client";
import { resultRows } from "./client";
import type { JournalKind } from "./journal-repo";

const cut = (s: string) => (s.length > STEP_SUMMARY_CHARS ? `${s.slice(0, STEP_SUMMARY_CHARS - 1)}…` : s);

interface StepRow {
  seq: number | string;
  kind: JournalKind;
  created_at: Date | string;
  execution_id: string | null;
  call_id: string | null;
  tool: string | null;
  text: string | null;
  turn: number | string | null;
  why: string | null;
  reason: string | null;
  from_step: number | string | null;
  call_names: string[] | null;
}

function summaryOf(r: StepRow): string {
  switch (r.kind) {
    case "turn": {
      const calls = r.call_names ?? [];
      const said = r.text ? `: ${r.text}` : "";
      return cut(`turn ${r.turn}${calls.length > 0 ? ` called ${calls.join(", ")}` : ""}${said}`);
    }
    case "call":
      return cut(`call ${r.tool ?? "?"}`);
    case "result":
      return cut(r.text ?? "");
    case "user":
      return cut(`user (${r.why ?? "input"}): ${r.text ?? ""}`);
    case "recovered":
      return cut(`recovered (${r.reason ?? "?"}) after step ${r.from_step ?? 0}`);
    case "snapshot":
      return "workspace snapshot";
    default:
      return r.kind;
  }
}

/**
 * One page of the job's steps, in journal order, after step `after`; null when the tenant has no
 * such job. The texts are cut in SQL (a tool result may be megabytes; a page carries summaries).
 * A `result` step's tool is its `call` row's. Rows at epoch 0 are a fork's copied prefix: their
 * execution is the source's, so `execution_id` is null.
 */
export async function listSteps(
  db: Db,
  tenantId: string,
  jobId: string,
  page: { after: number; limit: number },
): Promise<{ steps: StepView[]; nextAfter: number | null } | null> {
  const rows = resultRows<StepRow & { job_found: boolean }>(
    await db.execute(sql`
      WITH job AS (SELECT id FROM jobs WHERE id = ${jobId}::uuid AND tenant_id = ${tenantId})
      SELECT true AS job_found, r.seq, r.kind, r.created_at, e.id AS execution_id,
        r.payload->>'call_id' AS call_id,
        CASE WHEN r.kind = 'call' THEN r.payload->>'name'
             WHEN r.kind = 'result' THEN (SELECT c.payload->>'name' FROM job_journal c
               WHERE c.job_id = r.job_id AND c.kind = 'call' AND c.payload->>'call_id' = r.payload->>'call_id' LIMIT 1)
        END AS tool,
        left(coalesce(r.payload->>'text', r.payload->>'content'), ${STEP_SUMMARY_CHARS}) AS text,
        r.payload->>'turn' AS turn, r.payload->>'why' AS why, r.payload->>'reason' AS reason,
        r.payload->>'from_step' AS from_step,
        CASE WHEN r.kind = 'turn' THEN
          ARRAY(SELECT c->>'name' FROM jsonb_array_elements(r.payload->'calls') c) END AS call_names
      FROM job
      LEFT JOIN LATERAL (
        SELECT * FROM job_journal WHERE job_id = job.id AND seq > ${page.after} ORDER BY seq LIMIT ${page.limit + 1}
      ) r ON true
      LEFT JOIN executions e ON e.job_id = r.job_id AND e.epoch = r.epoch AND r.epoch > 0
      ORDER BY r.seq`),
  );
  if (rows.length === 0) return null;
  const found = rows.filter((r) => r.seq !== null);
  const steps = found.slice(0, page.limit).map((r) => ({
    step: Number(r.seq),
    kind: r.kind,
    at: new Date(r.created_at).toISOString(),
    summary: summaryOf(r),
    ...(r.call_id !== null ? { call_id: r.call_id } : {}),
    ...(r.tool !== null ? { tool: r.tool } : {}),
    execution_id: r.execution_id,
  }));
  const last = steps.at(-1);
  return { steps, nextAfter: found.length > page.limit && last ? last.step : null };
}

/**
 * What a fork needs of its source's prefix, read without the payloads' texts: how many steps
 * the source has journaled so far, and, up to `upTo` (null: all of them), the last turn's
 * number and the tool calls it left open (no `result` row), and every call id of the prefix that
 * has a result. Null when the tenant has no such job.
 */
export interface PrefixFacts {
  /** The source's steps when read (a running source journals more after). */
  steps: number;
  /** The prefix's last step (`upTo`, or `steps`). */
  upTo: number;
  /** The last turn of the prefix (0: none). */
  turn: number;
  /** That turn's calls with no result in the prefix, in order. */
  open: string[];
  /** The calls of the prefix that have a result row. */
  answered: Set<string>;
}

export async function readPrefixFacts(
  db: Db,
  tenantId: string,
  jobId: string,
  upTo: number | null,
): Promise<PrefixFacts | null> {
  const rows = resultRows<{
    seq: number | string | null;
    kind: JournalKind | null;
    call_id: string | null;
    turn: number | string | null;
    call_ids: string[] | null;
    total: number | string | null;
  }>(
    await db.execute(sql`
      WITH job AS (SELECT id FROM jobs WHERE id = ${jobId}::uuid AND tenant_id = ${tenantId})
      SELECT r.seq, r.kind, r.payload->>'call_id' AS call_id, r.payload->>'turn' AS turn,
        CASE WHEN r.kind = 'turn' THEN ARRAY(SELECT c->>'id' FROM jsonb_array_elements(r.payload->'calls') c) END AS call_ids,
        (SELECT max(seq) FROM job_journal WHERE job_id = job.id) AS total
      FROM job
      LEFT JOIN job_journal r ON r.job_id = job.id AND r.kind IN ('turn', 'result')
        AND (${upTo}::int IS NULL OR r.seq <= ${upTo}::int)
      ORDER BY r.seq`),
  );
  if (rows.length === 0) return null;
  const steps = Number(rows[0]?.total ?? 0);
  const facts: PrefixFacts = { steps, upTo: upTo ?? steps, turn: 0, open: [], answered: new Set() };
  let lastCalls: string[] = [];
  for (const r of rows) {
    if (r.kind === "turn") {
      facts.turn = Number(r.turn);
      lastCalls = r.call_ids ?? [];
    } else if (r.kind === "result" && r.call_id !== null) {
      facts.answered.add(r.call_id);
    }
  }
  facts.open = lastCalls.filter((id) => !facts.answered.has(id));
  return facts;
}

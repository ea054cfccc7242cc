/**
 * The job states, terminal states and job error codes have one home each in src/contracts; the
 * SQL and the docs that must list them too are compared with those lists here, so a state or code
 * added in one place and not the other fails a test instead of drifting.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { JOB_ERROR_CODES } from "../../src/contracts/errors";
import { TERMINAL_EVENT_TYPES } from "../../src/contracts/events";
import { INPUT_STATUSES, JobErrorSchema } from "../../src/contracts/job";
import {
  FINAL_STATES,
  isFinalState,
  JOB_STATES,
  stateOfTerminalEvent,
  terminalEventFor,
} from "../../src/contracts/job-state";

const ROOT = join(__dirname, "../..");
const read = (file: string) => readFileSync(join(ROOT, file), "utf8");
/** The quoted values of a SQL `IN (…)` list. */
const quoted = (list: string) => [...list.matchAll(/'([a-z_]+)'/g)].map((m) => m[1]);

function latestSnapshot(): { tables: Record<string, { checkConstraints: Record<string, { value: string }> }> } {
  const journal = JSON.parse(read("drizzle/meta/_journal.json")) as { entries: Array<{ idx: number }> };
  const last = Math.max(...journal.entries.map((e) => e.idx));
  return JSON.parse(read(`drizzle/meta/${String(last).padStart(4, "0")}_snapshot.json`));
}

describe("job states", () => {
  it("the terminal states are the states with a terminal event, both ways", () => {
    expect(JOB_STATES.filter(isFinalState)).toEqual([...FINAL_STATES]);
    expect(FINAL_STATES.map(terminalEventFor).sort()).toEqual([...TERMINAL_EVENT_TYPES].sort());
    expect(terminalEventFor("queued")).toBeNull();
    expect(terminalEventFor("running")).toBeNull();
    for (const s of FINAL_STATES) expect(stateOfTerminalEvent(terminalEventFor(s) as string)).toBe(s);
    expect(stateOfTerminalEvent("run.started")).toBeNull();
  });

  it("the migrations' check constraints list JOB_STATES and INPUT_STATUSES", () => {
    const tables = latestSnapshot().tables;
    expect(quoted(tables["public.jobs"]?.checkConstraints.jobs_state_ck?.value ?? "")).toEqual([...JOB_STATES]);
    expect(quoted(tables["public.job_inputs"]?.checkConstraints.job_inputs_status_ck?.value ?? "")).toEqual([
      ...INPUT_STATUSES,
    ]);
  });

  it("the settle-inputs trigger fires on exactly FINAL_STATES (its latest definition)", () => {
    const journal = JSON.parse(read("drizzle/meta/_journal.json")) as { entries: Array<{ tag: string }> };
    const defining = journal.entries
      .map((e) => read(`drizzle/${e.tag}.sql`))
      .filter((text) => text.includes("CREATE TRIGGER jobs_settle_inputs"));
    const when = /CREATE TRIGGER jobs_settle_inputs[^;]*WHEN \(NEW\.state IN \(([^)]*)\)/.exec(defining.at(-1) ?? "");
    expect(when).not.toBeNull();
    expect(quoted(when?.[1] ?? "")).toEqual([...FINAL_STATES]);
  });
});

describe("the child-resume trigger", () => {
  it("counts FINAL_STATES but `expired` as a child's end (a child has no ttl_s), in its latest trigger and function", () => {
    const journal = JSON.parse(read("drizzle/meta/_journal.json")) as { entries: Array<{ tag: string }> };
    const migrations = journal.entries.map((e) => read(`drizzle/${e.tag}.sql`).replace(/--.*$/gm, ""));
    const trigger = migrations.filter((t) => t.includes("CREATE TRIGGER jobs_child_finished")).at(-1) ?? "";
    const fn = migrations.filter((t) => /FUNCTION ear_child_finished\(\)/.test(t)).at(-1) ?? "";
    const when =
      /CREATE TRIGGER jobs_child_finished[^;]*NEW\.state IN \(([^)]*)\)[^;]*OLD\.state NOT IN \(([^)]*)\)/.exec(
        trigger,
      );
    const unfinished = /FUNCTION ear_child_finished\(\)[\s\S]*?c\.state NOT IN \(([^)]*)\)/.exec(fn);
    expect(when).not.toBeNull();
    expect(unfinished).not.toBeNull();
    const childEnds = FINAL_STATES.filter((s) => s !== "expired");
    expect(quoted(when?.[1] ?? "")).toEqual(childEnds);
    expect(quoted(when?.[2] ?? "")).toEqual(childEnds);
    expect(quoted(unfinished?.[1] ?? "")).toEqual(childEnds);
  });
});

describe("job error codes", () => {
  it("a job error outside the closed set is refused by the schema", () => {
    expect(JobErrorSchema.safeParse({ code: "lost", message: "m" }).success).toBe(true);
    expect(JobErrorSchema.safeParse({ code: "made_up", message: "m" }).success).toBe(false);
  });

  it("docs/api.md tables exactly JOB_ERROR_CODES", () => {
    const doc = read("docs/api.md");
    const section = doc.slice(doc.indexOf("### Job error codes"), doc.indexOf("## Cancel and input"));
    const documented = section
      .split("\n")
      .filter((l) => l.startsWith("| `"))
      .flatMap((l) => [...(l.split("|")[1] ?? "").matchAll(/`([a-z_]+)`/g)].map((m) => m[1]));
    expect([...new Set(documented)].sort()).toEqual([...JOB_ERROR_CODES].sort());
  });
});

/**
 * Schedules (docs/api.md "Schedules"): a cron in a timezone that submits a job at each tick. The
 * cron and timezone are checked beyond their shape by src/domain/schedule-time.ts (croner; for the
 * zone an explicit IANA-name rule, then Intl), in the route, so the 400 names the bad one.
 */
import { z } from "zod";
import { agentRefSchema } from "./agent";
import { JobInputSchema, LIMITS } from "./job";
import { refineStorableJson, text, whenValid } from "./text";

/** What a schedule does about ticks passed while nothing fired (src/domain/schedule-time.ts). */
export const CATCH_UP_MODES = ["latest", "none"] as const;
export type CatchUp = (typeof CATCH_UP_MODES)[number];

export const SCHEDULE_LIMITS = {
  maxCronChars: 200,
  maxTimezoneChars: 64,
  /** Schedules one tenant may have (each is a read every tick of every scheduler). */
  maxSchedulesPerTenant: 100,
} as const;

const metadata = z
  .record(text(), z.unknown())
  .superRefine(refineStorableJson)
  .refine((m) => JSON.stringify(m).length <= LIMITS.maxMetadataBytes, {
    message: `metadata must serialize to at most ${LIMITS.maxMetadataBytes} bytes`,
    ...whenValid,
  });

const cron = text().min(1).max(SCHEDULE_LIMITS.maxCronChars);
const timezone = text().min(1).max(SCHEDULE_LIMITS.maxTimezoneChars);

export const CreateScheduleBodySchema = z
  .object({
    /** 5 fields (minute hour day month weekday), or 6 with seconds first. */
    cron,
    /** IANA name (src/domain/schedule-time.ts `timezoneProblem`); default UTC. */
    timezone: timezone.optional(),
    /** The agent each tick's job runs (`name`: its latest version at the tick, or `name@N`). */
    agent: agentRefSchema.optional(),
    input: JobInputSchema,
    metadata: metadata.optional(),
    enabled: z.boolean().optional(),
    catch_up: z.enum(CATCH_UP_MODES).optional(),
  })
  .strict();
export type CreateScheduleBody = z.infer<typeof CreateScheduleBodySchema>;

export const PatchScheduleBodySchema = z
  .object({
    cron: cron.optional(),
    timezone: timezone.optional(),
    input: JobInputSchema.optional(),
    enabled: z.boolean().optional(),
    catch_up: z.enum(CATCH_UP_MODES).optional(),
    metadata: metadata.optional(),
  })
  .strict();
export type PatchScheduleBody = z.infer<typeof PatchScheduleBodySchema>;

const isoTime = z.iso.datetime();

export const ScheduleViewSchema = z.object({
  id: z.uuid(),
  cron: z.string(),
  timezone: z.string(),
  agent: z.string().nullable(),
  input: JobInputSchema,
  metadata: z.record(z.string(), z.unknown()),
  enabled: z.boolean(),
  catch_up: z.enum(CATCH_UP_MODES),
  /** The tick owed next; null while disabled (or when the cron never fires again). */
  next_run_at: isoTime.nullable(),
  /** The last tick that made a job (its scheduled_for). */
  last_run_at: isoTime.nullable(),
  /**
   * Why the last try to fire a tick failed (the tick is tried again after a growing delay), or why
   * job admission refused the last tick's job (no job; the next tick is admitted afresh); null
   * once a tick makes its job.
   */
  last_error: z.string().nullable(),
  created_at: isoTime,
  updated_at: isoTime,
});
export type ScheduleView = z.infer<typeof ScheduleViewSchema>;

export const ScheduleAnswerSchema = z.object({ schedule: ScheduleViewSchema });
export const SchedulePageSchema = z.object({ schedules: z.array(ScheduleViewSchema) });

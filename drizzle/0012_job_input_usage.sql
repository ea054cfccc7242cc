-- A job's input caps (LIMITS.maxInputsPerJob, maxInputBytesPerJob) are checked against counters
-- on the job row, which submitInput holds locked: the check and the increment are one statement
-- under that lock, so concurrent inputs see each other. Counting job_inputs read the statement's
-- snapshot, taken before the lock wait: 150 inputs at once stored 105-138 of 100 (issue 24).
-- A constant default is a catalog change only; existing jobs are counted once here.
ALTER TABLE "jobs" ADD COLUMN "input_count" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "input_bytes" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
UPDATE "jobs" SET "input_count" = u.n, "input_bytes" = u.bytes
FROM (SELECT job_id, count(*) AS n, sum(octet_length(content)) AS bytes FROM job_inputs GROUP BY job_id) u
WHERE "jobs"."id" = u.job_id;

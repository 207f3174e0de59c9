-- Per-schedule pause in the shape awa-pg 0.6.9 has: paused_at / paused_by on
-- awa.cron_jobs, a null paused_at meaning the schedule fires. The boolean `paused` stays
-- readable, derived from paused_at, so there is one truth for the pause. Missed-fire
-- policies are the two the evaluator implements.

ALTER TABLE awa.cron_jobs
    ADD COLUMN paused_at timestamptz,
    ADD COLUMN paused_by text;

UPDATE awa.cron_jobs SET paused_at = updated_at WHERE paused;

ALTER TABLE awa.cron_jobs DROP COLUMN paused;
ALTER TABLE awa.cron_jobs
    ADD COLUMN paused boolean GENERATED ALWAYS AS (paused_at IS NOT NULL) STORED;

UPDATE awa.cron_jobs SET missed_fire_policy = 'coalesce' WHERE missed_fire_policy = 'skip';
ALTER TABLE awa.cron_jobs
    DROP CONSTRAINT cron_jobs_missed_fire_policy_check,
    ADD CONSTRAINT cron_jobs_missed_fire_policy_check
        CHECK (missed_fire_policy IN ('coalesce', 'catch_up'));

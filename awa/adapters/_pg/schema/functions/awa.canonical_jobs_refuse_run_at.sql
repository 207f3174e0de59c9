-- The canonical table is updated in place, and Postgres checks a NOT VALID constraint
-- on every update of a row: one old out-of-range row would make each bulk update that
-- touches it fail (a drain, a retry of failed jobs). Triggers check only the run_at an
-- insert or update writes; the WHEN clause keeps the trigger function off the path of
-- every valid row.
CREATE OR REPLACE FUNCTION awa.canonical_jobs_refuse_run_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run_at % is outside 0001-01-01 .. 9999-12-31 23:59:59.999999 UTC',
            NEW.run_at
        USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_run_at_check',
              HINT = 'Python cannot read such an instant back; use a real date';
END
$$;

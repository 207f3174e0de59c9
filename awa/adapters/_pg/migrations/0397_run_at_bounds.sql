-- A job's run_at must be an instant Python can read back.
--
-- Postgres stores timestamptz from 4713 BC to 294276 AD plus +-infinity; Python's datetime
-- holds years 1..9999. A job inserted with run_at '-infinity' (awa.insert_job_compat
-- accepts it) or with datetime.min at +05:00 (1 BC in UTC) was stored, and then every
-- read that met the row failed: promotion on every tick, claims of its queue, listings.
-- The bounds are those of awa.domain.validation (MIN_RUN_AT, MAX_RUN_AT), which refuses
-- the same values before a Python producer sends them; these checks hold SQL producers
-- (awa.insert_job_compat, INSERT into awa.jobs, UPDATE awa.jobs SET run_at) to them.
--
-- The queue-storage constraints are NOT VALID: adding them does not scan the tables or
-- refuse a database that already holds such a row (its rows are not updated in place). Reads skip a row they cannot decode and log
-- its id; `UPDATE awa.jobs SET run_at = now() WHERE id = ...` repairs it.

CREATE FUNCTION awa.run_at_in_range(p_run_at timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_run_at BETWEEN '0001-01-01 00:00:00+00'::timestamptz
                        AND '9999-12-31 23:59:59.999999+00'::timestamptz
$$;

-- The canonical table is updated in place, and Postgres checks a NOT VALID constraint
-- on every update of a row: one old out-of-range row would make each bulk update that
-- touches it fail (a drain, a retry of failed jobs). Triggers check only the run_at an
-- insert or update writes; the WHEN clause keeps the trigger function off the path of
-- every valid row.
CREATE FUNCTION awa.canonical_jobs_refuse_run_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run_at % is outside 0001-01-01 .. 9999-12-31 23:59:59.999999 UTC',
            NEW.run_at
        USING ERRCODE = 'check_violation', CONSTRAINT = 'canonical_jobs_run_at_check',
              HINT = 'Python cannot read such an instant back; use a real date';
END
$$;

CREATE TRIGGER canonical_jobs_run_at_insert
    BEFORE INSERT ON awa.canonical_jobs
    FOR EACH ROW WHEN (NOT awa.run_at_in_range(NEW.run_at))
    EXECUTE FUNCTION awa.canonical_jobs_refuse_run_at();

CREATE TRIGGER canonical_jobs_run_at_update
    BEFORE UPDATE OF run_at ON awa.canonical_jobs
    FOR EACH ROW WHEN (NEW.run_at IS DISTINCT FROM OLD.run_at
                       AND NOT awa.run_at_in_range(NEW.run_at))
    EXECUTE FUNCTION awa.canonical_jobs_refuse_run_at();

CREATE FUNCTION awa.queue_storage_upgrade_run_at_bounds(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
DECLARE
    s text := quote_ident(p_schema);
    t text;
    spare text;
BEGIN
    IF to_regclass(format('%s.ring_state', s)) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('awa.queue_storage.install:' || p_schema, 0));
    -- The tables a producer writes: ready rows (run_at now or past) and deferred rows.
    -- Later states copy run_at from these.
    FOREACH t IN ARRAY ARRAY['ready_entries', 'deferred_jobs'] LOOP
        IF NOT EXISTS (
            SELECT 1 FROM pg_constraint
            WHERE conrelid = format('%s.%I', s, t)::regclass
              AND conname = t || '_run_at_check'
        ) THEN
            EXECUTE format(
                'ALTER TABLE %s.%I ADD CONSTRAINT %I CHECK (awa.run_at_in_range(run_at)) NOT VALID',
                s, t, t || '_run_at_check');
        END IF;
    END LOOP;
    -- Stand-ins built ahead for prune were copied from the ring tables before the check:
    -- drop them, prune builds new ones.
    FOR spare IN
        SELECT c.relname
        FROM pg_class c
        WHERE c.relnamespace = p_schema::regnamespace
          AND c.relkind = 'r'
          AND c.relname ~ '^ready_entries_[0-9]+_spare$'
    LOOP
        EXECUTE format('DROP TABLE %s.%I', s, spare);
    END LOOP;
END
$upgrade$;

CREATE OR REPLACE FUNCTION awa.install_queue_storage(
    p_schema text DEFAULT 'awa',
    p_queue_slot_count int DEFAULT 16,
    p_lease_slot_count int DEFAULT 8,
    p_reset boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql AS $install$
BEGIN
    IF p_schema = 'awa' AND (p_queue_slot_count <> 16 OR p_lease_slot_count <> 8) THEN
        RAISE EXCEPTION 'the default schema awa keeps 16 queue slots and 8 lease slots; '
            'install queue storage into another schema for other sizes'
            USING ERRCODE = '22023';
    END IF;
    PERFORM awa.install_queue_storage_tables(
        p_schema, p_queue_slot_count, p_lease_slot_count, p_reset);
    PERFORM awa.queue_storage_upgrade(p_schema);
    PERFORM awa.queue_storage_upgrade_claim_probe(p_schema);
    PERFORM awa.queue_storage_upgrade_lease_ring(p_schema);
    PERFORM awa.queue_storage_upgrade_control_fillfactor(p_schema);
    PERFORM awa.queue_storage_upgrade_lean_claims(p_schema);
    PERFORM awa.queue_storage_upgrade_retire_mark(p_schema);
    PERFORM awa.queue_storage_upgrade_run_at_bounds(p_schema);
END
$install$;

SELECT awa.queue_storage_upgrade_run_at_bounds(n.nspname)
FROM pg_namespace n
WHERE to_regclass(quote_ident(n.nspname) || '.ring_state') IS NOT NULL
ORDER BY n.nspname;

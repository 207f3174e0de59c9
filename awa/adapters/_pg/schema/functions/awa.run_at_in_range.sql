-- Whether run_at is an instant Python can read back (years 1..9999 UTC), the bounds of
-- awa.domain.validation (MIN_RUN_AT, MAX_RUN_AT).
CREATE OR REPLACE FUNCTION awa.run_at_in_range(p_run_at timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_run_at BETWEEN '0001-01-01 00:00:00+00'::timestamptz
                        AND '9999-12-31 23:59:59.999999+00'::timestamptz
$$;

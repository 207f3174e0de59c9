-- Bit i of a unique-state mask (reading the bit string left to right) is job_state i.
CREATE OR REPLACE FUNCTION awa.job_state_index(p_state awa.job_state) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE p_state
        WHEN 'scheduled' THEN 0
        WHEN 'available' THEN 1
        WHEN 'running' THEN 2
        WHEN 'completed' THEN 3
        WHEN 'retryable' THEN 4
        WHEN 'failed' THEN 5
        WHEN 'cancelled' THEN 6
        WHEN 'waiting_external' THEN 7
    END
$$;

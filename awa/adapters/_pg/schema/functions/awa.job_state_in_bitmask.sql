-- Whether p_state is in the unique-state mask p_mask (NULL mask: no state).
CREATE OR REPLACE FUNCTION awa.job_state_in_bitmask(p_mask bit(8), p_state awa.job_state) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_mask IS NOT NULL AND get_bit(p_mask, awa.job_state_index(p_state)) = 1
$$;

-- One key for the producer/transition lock ("AWA_STOR").
CREATE OR REPLACE FUNCTION awa.storage_transition_lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 4707489254420959058::bigint $$;

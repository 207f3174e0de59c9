-- Whether queue storage is installed in p_schema (its core tables exist).
CREATE OR REPLACE FUNCTION awa.queue_storage_installed(p_schema text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT to_regclass(quote_ident(p_schema) || '.ring_state') IS NOT NULL
       AND to_regclass(quote_ident(p_schema) || '.ready_entries') IS NOT NULL
       AND to_regclass(quote_ident(p_schema) || '.leases') IS NOT NULL
       AND to_regclass(quote_ident(p_schema) || '.deferred_jobs') IS NOT NULL
$$;

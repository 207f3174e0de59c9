-- Callback ids are opaque text to the engines; the public view shows them as uuid (ids the
-- runtime issues are uuids; any other text maps to a stable md5-derived uuid).
CREATE OR REPLACE FUNCTION awa.callback_id_as_uuid(p_callback_id text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_callback_id IS NULL THEN NULL
        WHEN p_callback_id ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
            THEN p_callback_id::uuid
        ELSE md5(p_callback_id)::uuid
    END
$$;

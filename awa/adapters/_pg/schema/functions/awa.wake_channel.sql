-- A queue's wake-up channel: 'awa:' || queue, cut to Postgres's 63-byte identifier limit
-- at a character boundary, as LISTEN cuts it and as awa.domain.channels does.
CREATE OR REPLACE FUNCTION awa.wake_channel(p_queue text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_channel text := 'awa:' || p_queue;
BEGIN
    -- PL/pgSQL, planned once per session: a SQL function called from the insert path's
    -- PL/pgSQL was planned again in every transaction (65 us of each insert).
    IF octet_length(v_channel) <= 63 THEN
        RETURN v_channel;
    END IF;
    -- The longest prefix of at most 63 bytes (characters take 1-4 bytes each).
    v_channel := left(v_channel, 63);
    WHILE octet_length(v_channel) > 63 LOOP
        v_channel := left(v_channel, -1);
    END LOOP;
    RETURN v_channel;
END
$$;

-- A queue's wake-up channel: 'awa:' || queue, cut to Postgres's 63-byte identifier limit
-- at a character boundary, as LISTEN cuts it and as awa.domain.channels does.
CREATE OR REPLACE FUNCTION awa.wake_channel(p_queue text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length('awa:' || p_queue) <= 63 THEN 'awa:' || p_queue
        -- the longest prefix of at most 63 bytes (characters take 1-4 bytes each)
        ELSE (SELECT s FROM generate_series(63, 1, -1) AS n,
                     LATERAL (SELECT left('awa:' || p_queue, n) AS s) c
              WHERE octet_length(s) <= 63
              ORDER BY n DESC LIMIT 1)
    END
$$;

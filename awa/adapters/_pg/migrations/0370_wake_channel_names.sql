-- Wake-up channels of long queue names.
--
-- A queue's wake-up channel is 'awa:' || queue, but a channel name is an identifier of at
-- most 63 bytes: pg_notify refuses a longer one ("channel name too long") and LISTEN cuts
-- it. Queue names may have 200 characters, so an insert into a queue named with more than
-- 59 bytes failed. awa.wake_channel() cuts the name to 63 bytes at a character boundary,
-- as LISTEN does and as the Python side (awa.domain.channels) does, and every function
-- that sent 'awa:' || <queue> is redefined to send awa.wake_channel(<queue>) instead.

CREATE FUNCTION awa.wake_channel(p_queue text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length('awa:' || p_queue) <= 63 THEN 'awa:' || p_queue
        -- the longest prefix of at most 63 bytes (characters take 1-4 bytes each)
        ELSE (SELECT s FROM generate_series(63, 1, -1) AS n,
                     LATERAL (SELECT left('awa:' || p_queue, n) AS s) c
              WHERE octet_length(s) <= 63
              ORDER BY n DESC LIMIT 1)
    END
$$;

DO $rewrite$
DECLARE
    f record;
    body text;
BEGIN
    FOR f IN
        SELECT p.oid
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'awa'
          AND p.prosrc ~ $re$pg_notify\('awa:' \|\| [A-Za-z_.]+,$re$
        ORDER BY p.oid
    LOOP
        body := regexp_replace(
            pg_get_functiondef(f.oid),
            $re$pg_notify\('awa:' \|\| ([A-Za-z_.]+),$re$,
            'pg_notify(awa.wake_channel(\1),',
            'g');
        EXECUTE body;
    END LOOP;
END
$rewrite$;

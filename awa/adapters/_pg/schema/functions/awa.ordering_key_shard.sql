-- The enqueue shard of an ordering key: the same FNV-style hash as awa.domain.partitioning.
CREATE OR REPLACE FUNCTION awa.ordering_key_shard(p_key bytea, p_shards int) RETURNS int
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    h numeric := 14695981039346656037;
    i int;
BEGIN
    IF p_shards IS NULL OR p_shards <= 1 OR p_key IS NULL THEN
        RETURN 0;
    END IF;
    FOR i IN 0 .. length(p_key) - 1 LOOP
        h := mod(h * 1099511628211 + get_byte(p_key, i), 18446744073709551616);
    END LOOP;
    RETURN mod(h, p_shards)::int;
END
$$;

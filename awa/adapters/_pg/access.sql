-- Whether this connection can change jobs: used to put operator surfaces in read-only mode.

-- name: write_access
-- The tables operator mutations write (those that exist in this schema); each privilege is
-- tested on its own because has_table_privilege with a list answers "any of them".
SELECT current_setting('transaction_read_only') = 'on' AS read_only_session,
       pg_is_in_recovery() AS in_recovery,
       coalesce(
           array_agg(t.name ORDER BY t.name) FILTER (
               WHERE NOT (has_table_privilege(t.oid, 'INSERT')
                          AND has_table_privilege(t.oid, 'UPDATE')
                          AND has_table_privilege(t.oid, 'DELETE'))),
           ARRAY[]::text[]
       ) AS not_writable
FROM (
    SELECT to_regclass(n) AS oid, n AS name
    FROM unnest(ARRAY[
        'awa.queue_meta', 'awa.canonical_jobs', 'awa.dlq_entries',
        'awa.ready_entries', 'awa.done_entries', 'awa.leases'
    ]) AS n
) AS t
WHERE t.oid IS NOT NULL

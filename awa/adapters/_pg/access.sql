-- Whether this connection can change jobs: used to put operator surfaces in read-only mode.

-- name: write_access
-- The tables operator mutations write (those that exist in this schema); each privilege is
-- tested on its own because has_table_privilege with a list answers "any of them".
-- On a replica it also says how far replay trails: the bytes received and not yet
-- replayed, the primary's commit time of the last replayed transaction, and whether the
-- WAL receiver is streaming.
SELECT current_setting('transaction_read_only') = 'on' AS read_only_session,
       pg_is_in_recovery() AS in_recovery,
       CASE WHEN pg_is_in_recovery()
            THEN pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint
       END AS replay_pending_bytes,
       CASE WHEN pg_is_in_recovery() THEN pg_last_xact_replay_timestamp() END AS last_replayed_at,
       CASE WHEN pg_is_in_recovery()
            THEN extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8
       END AS last_replayed_age_seconds,
       CASE WHEN pg_is_in_recovery()
            THEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')
       END AS streaming,
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

-- awa.jobs covers every plane (SQL_SURFACE.md, ADR 0006): the canonical rows, the
-- queue-storage jobs of schema awa, and those of a non-default queue-storage schema that
-- producers currently write to. UPDATE and DELETE through the view work on queue-storage
-- jobs by appending facts (tombstones, closures, new snapshots, deletion markers); no
-- immutable row is ever rewritten. INSERT through the view stays canonical-only.
--
-- awa.jobs_resolved is the resolution view of the queue storage installed in schema awa
-- (awa.queue_storage_install_views); awa.queue_storage_edit takes this view's row type.
-- requires: awa.callback_id_as_uuid, awa.queue_storage_jobs, awa.queue_storage_extra_schema
-- requires: awa.jobs_view_insert, awa.jobs_view_update, awa.jobs_view_delete
CREATE OR REPLACE VIEW awa.jobs AS
SELECT
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states, awa.callback_id_as_uuid(callback_id) AS callback_id, callback_timeout_at,
    callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease,
    progress
FROM awa.canonical_jobs
UNION ALL
SELECT
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states::bit(8), awa.callback_id_as_uuid(callback_id), callback_timeout_at,
    NULL::text, NULL::text, NULL::text, NULL::text, run_lease, progress
FROM awa.jobs_resolved
UNION ALL
-- Typmods do not survive a set-returning function; the casts keep the view's column types.
SELECT
    id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at,
    deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key,
    unique_states::bit(8), callback_id, callback_timeout_at, callback_filter,
    callback_on_complete, callback_on_fail, callback_transform, run_lease, progress
FROM awa.queue_storage_jobs(awa.queue_storage_extra_schema());

CREATE OR REPLACE TRIGGER jobs_view_insert
    INSTEAD OF INSERT ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION awa.jobs_view_insert();

CREATE OR REPLACE TRIGGER jobs_view_update
    INSTEAD OF UPDATE ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION awa.jobs_view_update();

CREATE OR REPLACE TRIGGER jobs_view_delete
    INSTEAD OF DELETE ON awa.jobs
    FOR EACH ROW EXECUTE FUNCTION awa.jobs_view_delete();

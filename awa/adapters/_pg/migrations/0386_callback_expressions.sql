-- CEL resolution expressions of callbacks registered on queue storage (the canonical
-- engine keeps them in its callback_* columns). One row per callback id. Resolving the
-- callback deletes its row; the leader's retention cleanup deletes rows older than a day
-- whose callback no longer has a lease in their queue-storage schema (rescued, cancelled).

CREATE TABLE IF NOT EXISTS awa.callback_expressions (
    callback_id  text PRIMARY KEY,
    queue_schema text NOT NULL,
    job_id       bigint NOT NULL,
    run_lease    bigint NOT NULL,
    filter       text,
    on_complete  text,
    on_fail      text,
    transform    text,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX IF NOT EXISTS idx_callback_expressions_created
    ON awa.callback_expressions (created_at);

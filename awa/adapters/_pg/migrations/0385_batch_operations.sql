-- Durable batch operations (set_priority, move_queue): the control row of each operation
-- and the snapshot of the jobs it targets. Shared by every engine; the maintenance leader
-- runs them (awa/runtime/batch_runner.py).

CREATE TABLE IF NOT EXISTS awa.batch_operations (
    id              uuid PRIMARY KEY,
    op_kind         text NOT NULL,
    filter          jsonb NOT NULL,
    spec            jsonb NOT NULL,
    state           text NOT NULL,
    submitted_by    text,
    submitted_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at      timestamptz,
    finalized_at    timestamptz,
    cursor          jsonb,
    total_matched   bigint,
    processed       bigint NOT NULL DEFAULT 0,
    skipped         bigint NOT NULL DEFAULT 0,
    errored         bigint NOT NULL DEFAULT 0,
    last_error      text,
    runner_instance uuid,
    retention_until timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT batch_operations_state_check CHECK (
        state IN ('pending', 'scanning', 'running', 'cancelling', 'completed', 'cancelled', 'failed')
    ),
    CONSTRAINT batch_operations_op_kind_check CHECK (op_kind IN ('set_priority', 'move_queue'))
);

CREATE INDEX IF NOT EXISTS idx_batch_operations_state_submitted
    ON awa.batch_operations (state, submitted_at);

CREATE INDEX IF NOT EXISTS idx_batch_operations_retention
    ON awa.batch_operations (retention_until)
    WHERE retention_until IS NOT NULL;

CREATE TABLE IF NOT EXISTS awa.batch_operation_items (
    operation_id uuid NOT NULL REFERENCES awa.batch_operations (id) ON DELETE CASCADE,
    job_id       bigint NOT NULL,
    state        text NOT NULL DEFAULT 'pending',
    error        text,
    processed_at timestamptz,
    PRIMARY KEY (operation_id, job_id),
    CONSTRAINT batch_operation_items_state_check CHECK (
        state IN ('pending', 'processed', 'skipped', 'errored')
    )
);

CREATE INDEX IF NOT EXISTS idx_batch_operation_items_pending
    ON awa.batch_operation_items (operation_id, job_id)
    WHERE state = 'pending';

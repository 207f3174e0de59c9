-- What the maintenance leader last found when it tried to reclaim each queue-storage
-- schema (ADR 0006, "Long transactions"): one row per (schema, concern). `queue` is the
-- queue ring's prune (`pruned`, `blocked`, ...) and, when blocked by a long transaction,
-- that transaction's pid and start; `horizon` is an old transaction holding back VACUUM of
-- the control tables (`held`, then `released` once it ended and the tables were
-- compacted). Written only when the outcome changes; `awa storage status` prints it.
CREATE TABLE IF NOT EXISTS awa.ring_maintenance (
    schema_name        text NOT NULL,
    concern            text NOT NULL,
    outcome            text NOT NULL,
    since              timestamptz NOT NULL DEFAULT now(),
    blocker_pid        int,
    blocker_xact_start timestamptz,
    detail             text,
    PRIMARY KEY (schema_name, concern)
);

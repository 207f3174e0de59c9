-- Batches (ADR 0035) and the retention of dependency edges (ADR 0032): a batch's counts
-- are read from its callback's edges, and the maintenance leader now prunes edges whose
-- child and parents finished past the retention. awa.batches names each batch (written
-- with the callback's edges, so a batch is known after its callback's row is reclaimed)
-- and keeps its counts once its edges are pruned (counted_at), for one more retention.

CREATE TABLE awa.batches (
    id bigint NOT NULL,
    size integer NOT NULL,
    completed integer,
    failed integer,
    cancelled integer,
    counted_at timestamptz,
    CONSTRAINT batches_pkey PRIMARY KEY (id),
    CONSTRAINT batches_size_check CHECK (size > 0),
    CONSTRAINT batches_counted_check CHECK (
        (counted_at IS NULL) = (completed IS NULL)
        AND (counted_at IS NULL) = (failed IS NULL)
        AND (counted_at IS NULL) = (cancelled IS NULL)
    )
);

CREATE INDEX batches_counted_at_idx ON awa.batches (counted_at) WHERE counted_at IS NOT NULL;

COMMENT ON TABLE awa.batches IS
    'One row per batch (id: its callback job''s): its size, and how its jobs ended once its dependency edges were pruned (counted_at).';

-- Parents that left without finishing while jobs still wait on them (ADR 0032, "A parent
-- that vanishes"). A DELETE on awa.jobs in SQL records the unfinished job it deleted
-- (deleted: the trigger saw the delete, so nothing is in doubt); the maintenance
-- leader's dependency_cleanup records a parent of an unresolved edge that no engine
-- holds (deleted false: it may be in the middle of a storage transition's move), and
-- answers it only once a later run, at least awa.domain.dependencies.VANISHED_GRACE
-- after that sighting, finds it absent again under the shared storage-transition lock.
-- An answered parent's row goes in the transaction that applies the children's policies.

CREATE TABLE awa.dependency_vanished_parents (
    parent_id bigint PRIMARY KEY,
    seen_at timestamptz NOT NULL,
    deleted boolean NOT NULL DEFAULT false
);

COMMENT ON TABLE awa.dependency_vanished_parents IS
    'Parents of unresolved dependency edges found gone, before their children are answered as if they were cancelled.';

-- The maintenance leader's lease (ADR 0014). Leadership is a row with an expiry that its
-- holder renews, not a session lock: a stopped, blocked or partitioned leader loses it one
-- ttl after its last renewal, and nothing depends on a session (transaction-mode poolers
-- hand every transaction a different server connection). ``term`` grows each time the
-- lease changes hands, so it orders leaders.

CREATE TABLE awa.leader_leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    term bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT leader_leases_name_length CHECK (length(name) BETWEEN 1 AND 64),
    CONSTRAINT leader_leases_holder_length CHECK (length(holder) BETWEEN 1 AND 200),
    CONSTRAINT leader_leases_term_positive CHECK (term > 0)
);

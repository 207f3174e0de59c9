-- Live queue overrides (awa queue overrides set|clear|show): when they last changed, and
-- the deadline override's range (0 = no deadline; dispatchers never cross zero live).

ALTER TABLE awa.queue_meta
    ADD COLUMN overrides_updated_at timestamptz,
    ADD CONSTRAINT queue_meta_override_deadline_ms_check
        CHECK (override_deadline_ms IS NULL OR override_deadline_ms >= 0);

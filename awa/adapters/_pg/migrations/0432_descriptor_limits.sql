-- Descriptor catalogs get the limits (and constraint names) awa-pg 0.6.9 has, so rows
-- written by hand or by another runtime obey the same rules as declared ones; every row
-- carries its hash and sync interval (stale and drift are derived from them at read time).

UPDATE awa.queue_descriptors SET descriptor_hash = 'unknown' WHERE descriptor_hash IS NULL;
UPDATE awa.queue_descriptors SET sync_interval_ms = 10000 WHERE sync_interval_ms IS NULL;
UPDATE awa.job_kind_descriptors SET descriptor_hash = 'unknown' WHERE descriptor_hash IS NULL;
UPDATE awa.job_kind_descriptors SET sync_interval_ms = 10000 WHERE sync_interval_ms IS NULL;

ALTER TABLE awa.queue_descriptors
    ALTER COLUMN descriptor_hash SET NOT NULL,
    ALTER COLUMN sync_interval_ms SET NOT NULL,
    ALTER COLUMN sync_interval_ms SET DEFAULT 10000,
    ADD CONSTRAINT queue_descriptors_queue_nonempty CHECK (length(queue) > 0),
    ADD CONSTRAINT queue_descriptors_queue_length CHECK (length(queue) <= 200),
    ADD CONSTRAINT queue_descriptors_display_length
        CHECK (display_name IS NULL OR length(display_name) <= 200),
    ADD CONSTRAINT queue_descriptors_description_len
        CHECK (description IS NULL OR length(description) <= 2000),
    ADD CONSTRAINT queue_descriptors_owner_length
        CHECK (owner IS NULL OR length(owner) <= 200),
    ADD CONSTRAINT queue_descriptors_docs_url_length
        CHECK (docs_url IS NULL OR length(docs_url) <= 2048),
    ADD CONSTRAINT queue_descriptors_tags_count CHECK (cardinality(tags) <= 20),
    ADD CONSTRAINT queue_descriptors_hash_nonempty CHECK (length(descriptor_hash) > 0),
    ADD CONSTRAINT queue_descriptors_hash_length CHECK (length(descriptor_hash) <= 128),
    ADD CONSTRAINT queue_descriptors_sync_interval_ms CHECK (sync_interval_ms > 0);

ALTER TABLE awa.job_kind_descriptors
    ALTER COLUMN descriptor_hash SET NOT NULL,
    ALTER COLUMN sync_interval_ms SET NOT NULL,
    ALTER COLUMN sync_interval_ms SET DEFAULT 10000,
    ADD CONSTRAINT job_kind_descriptors_kind_nonempty CHECK (length(kind) > 0),
    ADD CONSTRAINT job_kind_descriptors_kind_length CHECK (length(kind) <= 200),
    ADD CONSTRAINT job_kind_descriptors_display_length
        CHECK (display_name IS NULL OR length(display_name) <= 200),
    ADD CONSTRAINT job_kind_descriptors_description_len
        CHECK (description IS NULL OR length(description) <= 2000),
    ADD CONSTRAINT job_kind_descriptors_owner_length
        CHECK (owner IS NULL OR length(owner) <= 200),
    ADD CONSTRAINT job_kind_descriptors_docs_url_length
        CHECK (docs_url IS NULL OR length(docs_url) <= 2048),
    ADD CONSTRAINT job_kind_descriptors_tags_count CHECK (cardinality(tags) <= 20),
    ADD CONSTRAINT job_kind_descriptors_hash_nonempty CHECK (length(descriptor_hash) > 0),
    ADD CONSTRAINT job_kind_descriptors_hash_length CHECK (length(descriptor_hash) <= 128),
    ADD CONSTRAINT job_kind_descriptors_sync_interval_ms CHECK (sync_interval_ms > 0);

CREATE INDEX queue_descriptors_last_seen_at_idx ON awa.queue_descriptors (last_seen_at);
CREATE INDEX job_kind_descriptors_last_seen_at_idx ON awa.job_kind_descriptors (last_seen_at);

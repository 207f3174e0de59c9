-- Descriptor catalogs (awa.queue_descriptors, awa.job_kind_descriptors), shared by every
-- Postgres engine. {table} and {key} name the catalog's table and key column.

-- name: sync_descriptor
INSERT INTO awa.{table} AS d (
    {key}, display_name, description, owner, docs_url, tags, extra, descriptor_hash,
    sync_interval_ms, created_at, updated_at, last_seen_at
) VALUES (
    %(name)s, %(display_name)s, %(description)s, %(owner)s, %(docs_url)s, %(tags)s::text[],
    %(extra)s, %(hash)s, %(sync_interval_ms)s, %(now)s::timestamptz, %(now)s::timestamptz,
    %(now)s::timestamptz
)
ON CONFLICT ({key}) DO UPDATE SET
    display_name = EXCLUDED.display_name,
    description = EXCLUDED.description,
    owner = EXCLUDED.owner,
    docs_url = EXCLUDED.docs_url,
    tags = EXCLUDED.tags,
    extra = EXCLUDED.extra,
    descriptor_hash = EXCLUDED.descriptor_hash,
    sync_interval_ms = EXCLUDED.sync_interval_ms,
    updated_at = CASE WHEN d.descriptor_hash IS DISTINCT FROM EXCLUDED.descriptor_hash
                      THEN EXCLUDED.updated_at ELSE d.updated_at END,
    last_seen_at = EXCLUDED.last_seen_at

-- name: list_descriptors
SELECT {key} AS name, * FROM awa.{table} ORDER BY {key}

-- name: delete_unseen
DELETE FROM awa.{table} WHERE last_seen_at < %(cutoff)s::timestamptz

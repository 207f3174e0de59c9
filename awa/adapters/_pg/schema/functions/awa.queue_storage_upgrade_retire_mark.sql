-- Step of awa.install_queue_storage: claim_heads.retired_xid, the last transaction that
-- retired an unclaimed row of the lane (awa.queue_storage_retire_lanes); a claimer whose
-- snapshot cannot see it leaves the lane alone and claims again.
CREATE OR REPLACE FUNCTION awa.queue_storage_upgrade_retire_mark(p_schema text) RETURNS void
LANGUAGE plpgsql AS $upgrade$
BEGIN
    IF to_regclass(format('%s.claim_heads', quote_ident(p_schema))) IS NULL THEN
        RAISE EXCEPTION 'queue storage is not installed in schema %', p_schema;
    END IF;
    -- No default: a catalog-only change, and NULL ("never retired") costs claims nothing.
    -- Only when missing: ALTER TABLE takes ACCESS EXCLUSIVE even when the column exists.
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = format('%s.claim_heads', quote_ident(p_schema))::regclass
          AND attname = 'retired_xid' AND NOT attisdropped
    ) THEN
        EXECUTE format('ALTER TABLE %s.claim_heads ADD COLUMN IF NOT EXISTS retired_xid xid8',
            quote_ident(p_schema));
    END IF;
END
$upgrade$;

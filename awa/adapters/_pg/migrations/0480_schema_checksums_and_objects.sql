-- One source for the schema (ADR 0012).
--
-- * schema_version.checksum: the SHA-256 of each applied migration file. migrate refuses
--   a database whose recorded checksum no longer matches the file of that version (a
--   released migration was edited). Rows written before this column existed are filled
--   with the checksums of the files of the package that first migrates past it.
-- * schema_objects: the functions and views defined in awa/adapters/_pg/schema/, one file
--   each, with the SHA-256 of the file last applied. migrate re-applies a file, after the
--   migration stream, when its content differs from the recorded one.

ALTER TABLE awa.schema_version ADD COLUMN checksum text;

CREATE TABLE awa.schema_objects (
    name       text PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('function', 'view')),
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

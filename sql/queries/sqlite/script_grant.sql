-- A --sql script's own grant, when it runs (script_grant_objects.sql): the fence schema must be
-- there (:fence_table, the table that holds its version), at :schema_version or later; then the
-- grant of :resource to :holder for :ttl_ms, refused unless the version table holds exactly
-- :heads (sorted, comma-separated; '' for none). Three statements: each check needs the tables
-- the one before it proved are there.
INSERT INTO temp.fencemigrate_script_schema_check (fence_table, schema_version) VALUES (:fence_table, :schema_version);
INSERT INTO temp.fencemigrate_script_version_check (schema_version) VALUES (:schema_version);
INSERT INTO temp.fencemigrate_script_grant (resource, holder, ttl_ms, heads) VALUES (:resource, :holder, :ttl_ms, :heads)

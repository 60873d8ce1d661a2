-- Whether the ledger has a row of :version_table (none: a database fenced for the first time
-- adopts the revisions its version table applies).
SELECT 1 FROM {schema}_applied_revision WHERE version_table = :version_table LIMIT 1

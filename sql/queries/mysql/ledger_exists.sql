-- Whether the ledger has a row of :version_table (none: a database fenced for the first time
-- adopts the revisions its version table applies). A locking read: it sees the latest committed
-- rows, not the transaction's snapshot, so a run that waited for another's adoption sees its rows.
SELECT 1 FROM {schema}_applied_revision WHERE version_table = :version_table LIMIT 1 LOCK IN SHARE MODE

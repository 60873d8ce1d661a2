-- Whether the ledger has a row of :version_table: adoption's first look, before its lock (the same
-- read as ledger_exists.sql, which asks again under the lock).
SELECT 1 FROM {schema}.applied_revision WHERE version_table = :version_table LIMIT 1

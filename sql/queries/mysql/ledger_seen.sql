-- Whether the ledger has a row of :version_table, read without locking (a consistent read: no
-- wait behind another writer's row locks). Adoption's first look: a run that finds a row is done;
-- one that finds none takes the adoption lock and asks again with ledger_exists.sql's locking read.
SELECT 1 FROM {schema}_applied_revision WHERE version_table = :version_table LIMIT 1

-- Pre-check mode, after :revision's downgrade DDL, in the transaction that writes Alembic's
-- version row: the row this run marked 'rolling_back' goes (the ROLLBACK event is written by the
-- ledger's trigger). 0 rows: the mark is not this run's any more.
DELETE FROM {schema}_applied_revision
 WHERE version_table = :version_table AND revision = :revision
   AND state = 'rolling_back' AND state_token = :token

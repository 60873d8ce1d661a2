-- Pre-check mode, after :revision's DDL, in the transaction that writes Alembic's version row:
-- the row this run marked 'applying' is applied (the APPLY event is written by the ledger's
-- trigger). 0 rows: the mark is not this run's any more.
UPDATE {schema}_applied_revision
   SET state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL,
       applied_at = UTC_TIMESTAMP(6)
 WHERE version_table = :version_table AND revision = :revision
   AND state = 'applying' AND state_token = :token

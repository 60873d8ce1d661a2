-- Remove the ledger row of a revision that was rolled back, and log who rolled it back.
SELECT {schema}.record_rollback(:version_table, :revision, :resource, :token, :holder)

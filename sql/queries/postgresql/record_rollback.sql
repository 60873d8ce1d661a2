-- Remove the ledger row of a revision that was rolled back.
SELECT {schema}.record_rollback(:version_table, :revision)

-- Remove the ledger row of a revision that was rolled back (or unstamped: :method 'stamp'), and log
-- who did it; :detail (JSON, or NULL) names the applied text whose downgrade() ran in place of the file's.
SELECT {schema}.record_rollback(:version_table, :revision, :resource, :token, :holder, :method, :detail)

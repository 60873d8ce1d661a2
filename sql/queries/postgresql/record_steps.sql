-- Apply or roll back several ledger rows in order; returns the transaction id.
SELECT {schema}.record_steps(:version_table, :resource, :token, :holder, :actions, :revisions, :methods, :shas, :sources, :details)

-- Take back the ledger row and the COMMIT check of claim_and_record.
SELECT {schema}.undo_record(:version_table, :revision)

-- Pre-check mode: the detail (JSON, or NULL) of the ROLLBACK event the ledger's trigger writes when
-- the next settle_rollback.sql deletes a row: set before it, back to NULL after it.
SET @fencemigrate_rollback_detail = :detail

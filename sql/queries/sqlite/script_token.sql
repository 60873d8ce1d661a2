-- The token a --sql script was granted when it ran (script_grant_objects.sql), read in its own
-- session where its claims and ledger rows take a token: an expression, not a statement. No row
-- (nothing was granted in this session): NULL, which the claim refuses and the ledger's NOT NULL too.
(SELECT s.token FROM temp.fencemigrate_script_lease s)

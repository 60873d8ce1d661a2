-- The token an offline script was granted when it ran (script_grant_function.sql), read in its own
-- session where its claims and ledger calls take a token: an expression, not a statement. No such
-- table (nothing was granted in this session): the statement fails; no row: claim() refuses NULL.
(SELECT s.token FROM pg_temp.fencemigrate_script_lease s)

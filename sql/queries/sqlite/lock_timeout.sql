-- Bound how long this connection waits for SQLite's write lock (milliseconds). A connection
-- setting, not a statement of the transaction: a grant sets it to what is left of --wait right
-- before its BEGIN IMMEDIATE (the wait for every other writer: a migration in flight, another
-- grant), and back to busy_timeout.sql's value right after. PRAGMA takes no bound parameters:
-- :timeout_ms is written into the statement as an integer literal.
PRAGMA busy_timeout = :timeout_ms

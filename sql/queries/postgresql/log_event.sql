-- Append one event to the log read by `fencemigrate timeline`; :at is NULL for "now" (the database's
-- clock), or when it happened (an expiry is seen after the fact but dated when the lease ran out).
-- Through the owner's log_event(), which alone writes the log (a GRANT event only in its grant's
-- transaction).
SELECT {schema}.log_event(CAST(:at AS timestamptz), :resource, :kind, :holder, CAST(:token AS bigint), :revision, :detail)

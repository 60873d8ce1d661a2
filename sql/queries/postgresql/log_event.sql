-- Append one event to the log read by `fencemigrate timeline`; :at is NULL for "now" (the database's
-- clock), or when it happened (an expiry is seen after the fact but dated when the lease ran out).
INSERT INTO {schema}.fence_event (at, resource, kind, holder, token, revision, detail)
VALUES (coalesce(CAST(:at AS timestamptz), clock_timestamp()), :resource, :kind, :holder, :token, :revision, :detail)

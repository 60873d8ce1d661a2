-- Take pre-check mode's named lock on :resource for this session, waiting at most :timeout_ms:
-- 1 when taken, 0 when it was not free in time.
SELECT {schema}.named_lock(:resource, CAST(:timeout_ms AS bigint))::int

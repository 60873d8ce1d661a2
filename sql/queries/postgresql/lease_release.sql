-- Free :holder's lease of :resource (the grant with :token, or its current one when NULL); the
-- token counter stays. A release also wakes the runners waiting for the lease (LISTEN
-- fencemigrate_lease, see lease_listen.sql): the notification goes out when this transaction
-- commits, and only when a grant was released.
WITH released AS (
    UPDATE {schema}.lease
       SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
     WHERE resource = :resource
       AND holder = :holder
       AND token = coalesce(CAST(:token AS bigint), token)
    RETURNING token
)
SELECT token, pg_notify('fencemigrate_lease', CAST(:resource AS text)) AS woken FROM released

-- Append one event to the log read by `fencemigrate timeline`; :at is NULL for "now" (the
-- server's UTC clock), or when it happened (UTC).
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, revision, detail)
VALUES (COALESCE(:at, UTC_TIMESTAMP(6)), :resource, :kind, :holder, :token, :revision, :detail)

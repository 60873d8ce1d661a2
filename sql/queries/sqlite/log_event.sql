-- Append one event to the log read by `fencemigrate timeline`; :at is NULL for "now" (SQLite's
-- clock), or when it happened as ISO-8601 UTC text ('2026-11-29T14:26:00.000Z').
INSERT INTO {schema}_fence_event (at, resource, kind, holder, token, revision, detail)
VALUES (coalesce(:at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), :resource, :kind, :holder, :token, :revision, :detail)

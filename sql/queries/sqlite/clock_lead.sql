-- How far SQLite's clock (the system clock of the machine running this process) is ahead of the
-- newest event in the fence event log, in days, and that event's time (NULLs: no event yet).
SELECT julianday('now') - julianday(max(at)) AS days_ahead, max(at) AS newest,
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now
  FROM {schema}_fence_event

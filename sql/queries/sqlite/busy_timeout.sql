-- How long this connection waits for SQLite's write lock (milliseconds): its busy timeout.
PRAGMA busy_timeout

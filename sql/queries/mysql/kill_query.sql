-- A run stopped by SIGTERM/SIGINT: end the statement its session :connection_id is running. The
-- driver cannot cancel it (psycopg can, on PostgreSQL), and the server would otherwise run it to
-- the end, DDL included, after the run has gone and released its lease.
KILL QUERY :connection_id

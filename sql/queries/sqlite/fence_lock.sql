-- The fence token of :resource for a grant (no row: never claimed). No row lock on SQLite: the
-- grant's BEGIN IMMEDIATE holds the database's only write lock, so no migration is in flight.
SELECT token FROM {schema}_agent_fence WHERE resource = :resource

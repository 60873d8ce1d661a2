-- fencemigrate 0.5 -> 0.6: no token is issued twice across a failover.
--
-- ALTER EXTENSION fencemigrate UPDATE TO '0.6' runs this file; the runner applies it itself
-- to a database at 0.5 (a fresh install runs the current version's full script instead).
\echo Use "ALTER EXTENSION fencemigrate UPDATE TO '0.6'" to load this file. \quit

CREATE OR REPLACE FUNCTION @extschema@.schema_version() RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '0.6'::text $$;

-- The incarnation of the database a lease service last granted on, written by every grant
-- (grant_fence.sql): the cluster's system identifier, the WAL timeline it wrote on and the
-- database's OID (queries/postgresql/incarnation.sql), and for Redis grants the Redis server's run
-- id. A grant under another incarnation (a standby promoted, a point-in-time recovery, a restore
-- into a new cluster or database, a Redis restart or failover) may have lost the last grants
-- issued: it issues its token from an epoch further on, ((highest >> 32) + timeline) << 32, above
-- every token the lost history could have issued (see README, Replicated PostgreSQL). NULL: never
-- granted since 0.6, or external tokens only.
ALTER TABLE @extschema@.agent_fence ADD COLUMN incarnation text;

-- How the lease's grant was replicated: 'synchronous' (the primary had synchronous standbys; the
-- grant committed synchronously whatever the session's synchronous_commit, and the lease service
-- reported it granted only once a standby had confirmed it), 'asynchronous' (no synchronous
-- standby: a failover may lose the grant, and the next grant after it starts a new epoch).
ALTER TABLE @extschema@.lease ADD COLUMN replication text
    CHECK (replication IN ('synchronous', 'asynchronous'));

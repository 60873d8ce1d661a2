-- This database's incarnation, and the one recorded by the last grant of :resource (its fence row,
-- which the grant has locked): the cluster's system identifier (a restore into a new cluster
-- changes it), the WAL timeline the server writes on now (a promotion or a point-in-time recovery
-- starts a new one; read from the current WAL file's name, which moves at once, unlike
-- pg_control_checkpoint() before the first checkpoint) and the database's OID (a restore into a
-- new database changes it). Callable by any role.
SELECT format('%s/%s/%s',
              (pg_control_system()).system_identifier,
              ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint,
              (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())) AS current,
       (SELECT f.incarnation FROM {schema}.agent_fence f WHERE f.resource = :resource) AS recorded

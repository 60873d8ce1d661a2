-- A runner waiting for the lease hears every release in this database (lease_release.sql);
-- the payload is the resource released.
LISTEN fencemigrate_lease

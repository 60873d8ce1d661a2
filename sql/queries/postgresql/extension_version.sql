-- The version of the fencemigrate extension when it was loaded with CREATE EXTENSION, else no row.
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'fencemigrate'

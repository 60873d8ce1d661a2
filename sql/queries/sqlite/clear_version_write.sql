-- The fenced run has written Alembic's version table: tokenless writes are refused again.
DELETE FROM {schema}_version_write_claim

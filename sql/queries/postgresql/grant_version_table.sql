-- `fencemigrate install --grant-to ROLE`, after grant_to_migration_role(): the GRANT that lets ROLE
-- read and write Alembic's version table :relation, which install created as the owner of the
-- fence, so ROLE writes its rows but cannot drop, alter or switch off the table's guard trigger.
-- NULL when the table does not exist (tokenless writes allowed: ROLE creates and owns it).
SELECT format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %s TO %I', to_regclass(:relation), CAST(:role AS text))
 WHERE to_regclass(:relation) IS NOT NULL

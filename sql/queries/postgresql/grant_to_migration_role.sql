-- `fencemigrate install --grant-to ROLE`: what the role that runs migrations may read and write in
-- the fence schema, which it does not own (see grant_to_migration_role() in the fence schema).
SELECT {schema}.grant_to_migration_role(:role)

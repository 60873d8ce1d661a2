-- `fencemigrate resolve REV --as applied`: the dirty row of :revision is settled as applied.
UPDATE {schema}.applied_revision
   SET state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL
 WHERE version_table = :version_table AND revision = :revision AND state <> 'applied'

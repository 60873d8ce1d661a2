-- `fencemigrate resolve REV --as rolled-back`: the dirty row of :revision goes.
DELETE FROM {schema}_applied_revision WHERE version_table = :version_table AND revision = :revision

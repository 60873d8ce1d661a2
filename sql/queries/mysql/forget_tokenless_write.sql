-- `fencemigrate resolve`: the refused writes of :revision are settled.
DELETE FROM {schema}_tokenless_write WHERE version_table = :version_table AND revision = :revision

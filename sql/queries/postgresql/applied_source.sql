-- `fencemigrate show REV --applied` and check --db's drift diff: the ledger row of :revision with
-- the text of its file as applied (fence schema 0.8; source NULL: not recorded).
SELECT revision, resource, applied_token, holder, method, applied_at, state, script_sha256, source
  FROM {schema}.applied_revision
 WHERE version_table = :version_table AND revision = :revision

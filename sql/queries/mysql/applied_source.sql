-- `fencemigrate show REV --applied` and check --db's drift diff: the ledger row of :revision with
-- the text of its file as applied, uncompressed (fence schema 0.6, which stores COMPRESS(text);
-- source NULL: not recorded).
SELECT revision, resource, applied_token, holder, method, applied_at, state, script_sha256,
       CONVERT(UNCOMPRESS(source) USING utf8mb4) AS source
  FROM {schema}_applied_revision
 WHERE version_table = :version_table AND revision = :revision

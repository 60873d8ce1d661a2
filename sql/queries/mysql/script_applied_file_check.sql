-- A --sql script's downgrade of :revision, before its mark: refused unless the database applied
-- the file whose downgrade() the script holds (:script_sha256), or recorded no sha256 of it.
SET @fencemigrate_refusal = IF(
    EXISTS (SELECT 1 FROM {schema}_applied_revision a
             WHERE a.version_table = :version_table AND a.revision = :revision
               AND a.script_sha256 <> :script_sha256),
    'fencemigrate: a revision this script rolls back was applied from another text than the file it rolls it back with: nothing was rolled back. Roll it back with fencemigrate itself, which runs the downgrade() of the text as applied, or write the script again from that text (fencemigrate show REV --applied > FILE)',
    NULL)

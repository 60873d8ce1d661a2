-- The token that applied :revision (no row if no fenced run recorded it).
SELECT applied_token FROM {schema}_applied_revision
 WHERE version_table = :version_table AND revision = :revision

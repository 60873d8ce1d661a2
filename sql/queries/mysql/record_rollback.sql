-- Remove the ledger row of a revision that was rolled back.
DELETE FROM {schema}_applied_revision WHERE version_table = :version_table AND revision = :revision

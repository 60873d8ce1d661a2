-- A --sql script's downgrade of :revision: stop (its transaction rolls back, nothing is rolled back)
-- unless the database applied the file whose downgrade() the script holds (sha256 :script_sha256),
-- or its ledger row records no sha256. Written only into scripts: run online, the runner compares.
DO $fencemigrate_check$
BEGIN
    IF EXISTS (SELECT 1 FROM {schema}.applied_revision
                WHERE version_table = :version_table AND revision = :revision
                  AND script_sha256 <> :script_sha256) THEN
        RAISE EXCEPTION 'fencemigrate: % was applied from another text than the file this script rolls it back with (sha256 %): nothing was rolled back', :revision, :script_sha256
              USING HINT = 'Roll it back with fencemigrate itself, which runs the downgrade() of the text as applied, or write the script again from that text (fencemigrate show ' || :revision || ' --applied > FILE).';
    END IF;
END
$fencemigrate_check$

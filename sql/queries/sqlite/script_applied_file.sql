-- A --sql script's downgrade of :revision: stop unless the database applied the file whose
-- downgrade() the script holds (sha256 :script_sha256), or recorded no sha256 of it
-- (script_objects.sql). Written only into scripts: run online, the runner compares.
INSERT INTO temp.fencemigrate_script_applied_file (version_table, revision, script_sha256)
VALUES (:version_table, :revision, :script_sha256)

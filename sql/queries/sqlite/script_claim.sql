-- A --sql script's claim of :resource with :token (a literal, or the token the script was granted,
-- read in its session): the trigger fencemigrate_script_claim (script_objects.sql) refuses or
-- claims; :marks_version_write (1) before the ledger and version rows.
INSERT INTO temp.fencemigrate_script_claim (resource, token, marks_version_write)
VALUES (:resource, :token, :marks_version_write)

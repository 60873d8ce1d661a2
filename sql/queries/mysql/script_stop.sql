-- A --sql script's stop after each of its checks (script_*_check.sql, which leave their refusal in
-- @fencemigrate_refusal, or NULL when the check passed): the refusal is raised by the fence
-- schema's script_refusal table (its trigger SIGNALs the message), which stops the mysql client in
-- batch mode. Under `--force` the client goes on: the script's session is then killed (KILL of its
-- own CONNECTION_ID(), prepared: no server variable named), the batch client does not reconnect, and
-- every later statement fails; the session's named locks go with it and its open transaction rolls
-- back. A check that could not run at all (a table missing) leaves the refusal it began with.
INSERT INTO {schema}_script_refusal (message)
SELECT @fencemigrate_refusal FROM DUAL WHERE @fencemigrate_refusal IS NOT NULL;
SET @fencemigrate_stop = IF(@fencemigrate_refusal IS NULL, 'DO 0', CONCAT('KILL ', CONNECTION_ID()));
PREPARE fencemigrate_stop FROM @fencemigrate_stop;
EXECUTE fencemigrate_stop;
DEALLOCATE PREPARE fencemigrate_stop

-- A --sql script, after marking :revision (begin_apply.sql / begin_rollback.sql) and before its
-- DDL: refused (FENCED) unless the mark is there, :state under :token, and the fence of :resource
-- still holds :token (a newer grant has superseded the script otherwise, and the mark was not written).
SET @fencemigrate_refusal = IF(
    EXISTS (SELECT 1 FROM {schema}_applied_revision a, {schema}_agent_fence f
             WHERE a.version_table = :version_table AND a.revision = :revision
               AND a.state = :state AND a.state_token = :token
               AND f.resource = :resource AND f.token = :token),
    NULL,
    CONCAT('FENCED: a newer token has written to ', :resource, ' since this script''s token (',
           COALESCE(:token, 'none'), ') was issued; ', :revision, ' was not started. This is NOT a transient ',
           'error: do not retry; re-read the state (fencemigrate state) and re-plan'))

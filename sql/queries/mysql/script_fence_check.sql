-- A --sql script, before a stamp's ledger rows: refused (FENCED) unless the fence of :resource
-- still holds :token.
SET @fencemigrate_refusal = IF(
    EXISTS (SELECT 1 FROM {schema}_agent_fence f WHERE f.resource = :resource AND f.token = :token),
    NULL,
    CONCAT('FENCED: a newer token has written to ', :resource, ' since this script''s token (',
           COALESCE(:token, 'none'), ') was issued. This is NOT a transient error: do not retry; re-read the ',
           'state (fencemigrate state) and re-plan. Nothing after this statement ran'))

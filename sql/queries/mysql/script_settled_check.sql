-- A --sql script, after :revision's version write and settle_apply.sql / settle_rollback.sql:
-- refused unless the ledger settled it (:applied 1: its row applied under :token; 0: its row gone).
SET @fencemigrate_refusal = IF(
    IF(:applied,
       EXISTS (SELECT 1 FROM {schema}_applied_revision a
                WHERE a.version_table = :version_table AND a.revision = :revision
                  AND a.state = 'applied' AND a.applied_token = :token),
       NOT EXISTS (SELECT 1 FROM {schema}_applied_revision a
                    WHERE a.version_table = :version_table AND a.revision = :revision)),
    NULL,
    CONCAT('fencemigrate: the ledger row of ', :revision, ' is no longer marked by this script (token ',
           COALESCE(:token, 'none'), '): another writer changed it while the revision ran; see fencemigrate state'))

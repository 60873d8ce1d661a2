-- Has :token written to :resource (applied, stamped, rolled back or resolved a revision)? A FENCED
-- message says "has since written" only then: a grant advances the fence before its holder writes.
SELECT EXISTS (
    SELECT 1
      FROM {schema}_fence_event
     WHERE resource = :resource
       AND token = :token
       AND kind IN ('APPLY', 'STAMP', 'ROLLBACK', 'UNSTAMP', 'RESOLVE')
) AS wrote

-- Refuse (FM001) unless every revision in :revisions was applied under :token.
SELECT {schema}.check_reapply(:version_table, :resource, :revisions, :token)

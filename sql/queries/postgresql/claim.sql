-- Claim the fence for :resource with :token; raises FM001 (FENCED) if a higher token has written.
SELECT {schema}.claim(:resource, :token)

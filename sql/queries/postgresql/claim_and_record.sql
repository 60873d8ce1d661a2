-- Claim, write the ledger row of the revision about to run and ask for the check at COMMIT.
SELECT {schema}.claim_and_record(:resource, :token, :version_table, to_regclass(:version_relation), :revision, :holder, :script_sha256, :source)

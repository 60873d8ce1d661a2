-- Put the guard trigger on Alembic's version table :relation (ledger name :version_table) unless it
-- is there, the table does not exist yet or tokenless writes were allowed: true when guarded.
SELECT {schema}.guard_version_table(:version_table, to_regclass(:relation))

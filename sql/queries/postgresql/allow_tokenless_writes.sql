-- Opt out: record that :version_table takes writes without a token and remove its guard trigger.
SELECT {schema}.allow_tokenless_writes(:version_table, to_regclass(:relation))

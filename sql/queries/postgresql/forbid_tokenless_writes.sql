-- Opt back in: forget the opt-out of :version_table and guard it again (true when guarded).
SELECT {schema}.forbid_tokenless_writes(:version_table, to_regclass(:relation))

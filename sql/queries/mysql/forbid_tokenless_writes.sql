-- Opt back in: forget the opt-out of :version_table (its triggers are created again too).
DELETE FROM {schema}_tokenless_writes_allowed WHERE version_table = :version_table

"""What fencemigrate keeps in the database beside Alembic's version table, and how it is read and
kept: :mod:`.install` (the fence schema and its guards), :mod:`.guard` (the version table's guard),
:mod:`.version_table`, :mod:`.tokens` (where a resource's tokens come from), :mod:`.adoption`
(a database plain Alembic migrated), :mod:`.events` (the event log) and :mod:`.timeline` (reading
it), :mod:`.state` (what an agent reads before it re-plans), :mod:`.objects` (the fence's own
objects)."""

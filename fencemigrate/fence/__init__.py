"""What fencemigrate keeps in the database beside Alembic's version table, as its readers see it:
:mod:`.state` (heads, fence rows, ledger, leases and what is wrong with them) and :mod:`.timeline`
(the event log); :mod:`.version_table` creates Alembic's version table guarded."""

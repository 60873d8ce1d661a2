"""Fault-injection harness: random pauses, kills and connection faults against real servers.

Run it with ``bash bench/faults/run --seed S --schedules N --budget SECONDS [--jobs N]``. Modules, one job each:

* :mod:`faults.schedule` -- seeded random schedules (who runs what, when, and which faults);
* :mod:`faults.backends` -- the databases (PostgreSQL, SQLite, MariaDB, Redis leases) and their SQL;
* :mod:`faults.project` -- the Alembic project whose revisions record what they commit;
* :mod:`faults.launch` -- the ``fencemigrate`` CLI with stop points on chosen SQL statements;
* :mod:`faults.control` -- the control: plain Alembic behind a hand-rolled lease;
* :mod:`faults.execute` -- runs one schedule for one system and injects its faults;
* :mod:`faults.elements` -- the schedule elements: MCP writers, SQL attacks, mixed token sources, colliding
  resource names, dump and restore;
* :mod:`faults.checker` -- pure checks over the recorded history;
* :mod:`faults.summary` -- the figures printed at the end, and their merge over shards;
* :mod:`faults.shards` -- ``--jobs N``: the schedules in N shards at once, each with its own servers.
"""

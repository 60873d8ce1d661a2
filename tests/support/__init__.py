"""Test helpers for fencemigrate's test suite.

Importable as ``support`` (``from support.db import query``): ``tests/conftest.py``
puts the ``tests`` directory on ``sys.path``. Every helper a test module uses lives here: no test
module imports another one.

Modules:

* :mod:`support.pg` -- where the test PostgreSQL server is (env vars) and URL building.
* :mod:`support.db` -- small synchronous psycopg helpers: ``query``, ``table_names``...
* :mod:`support.project` -- real Alembic projects on disk, and running the
  ``fencemigrate`` / ``alembic`` command lines against them.
* :mod:`support.in_process` -- ``fencemigrate`` run inside the test process (``Project.run_cli``'s default).
* :mod:`support.zygote` -- the ``alembic`` / ``fencemigrate`` processes of ``run_command``, forked
  from one that imported their libraries already.
* :mod:`support.replication` -- a primary and its streaming standby, and the faults of a
  failover (WAL held back, immediate stop, promotion).
* :mod:`support.fence_rows`, :mod:`support.sqlite_rows`, :mod:`support.mysql_rows`,
  :mod:`support.backend_rows` -- what the fence tables and version tables hold, per database.
* :mod:`support.offline_sql`, :mod:`support.old_schema`, :mod:`support.mcp_client`,
  :mod:`support.incident_story`, :mod:`support.model_projects`, :mod:`support.pg_roles`,
  :mod:`support.git_repos`, :mod:`support.background_runs` -- scenarios and clients shared by
  several test modules.
"""

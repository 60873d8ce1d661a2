"""Test helpers for fencemigrate's test suite.

Importable as ``support`` (``from support.db import query``): ``tests/conftest.py``
puts the ``tests`` directory on ``sys.path``. Nothing in here imports fencemigrate,
so the helpers work before (and independently of) the package itself.

Modules:

* :mod:`support.pg` -- where the test PostgreSQL server is (env vars) and URL building.
* :mod:`support.db` -- small synchronous psycopg helpers: ``query``, ``table_names``...
* :mod:`support.project` -- real Alembic projects on disk, and running the
  ``fencemigrate`` / ``alembic`` command lines against them.
* :mod:`support.replication` -- a primary and its streaming standby, and the faults of a
  failover (WAL held back, immediate stop, promotion).
"""

"""Shared fixtures: a fresh PostgreSQL database per test and real Alembic projects.

The server comes from ``FENCEMIGRATE_TEST_PG_HOST`` / ``FENCEMIGRATE_TEST_PG_PORT``
(``bash .ci/test`` starts one and sets them). Without a reachable server the run
stops with a non-zero exit status: database tests are never skipped.

Fixtures:

* ``pg_server`` (session) -- :class:`support.pg.PgServer`, checked reachable.
* ``postgresql_noproc`` (session) -- pytest-postgresql's executor for that server;
  it creates the template database every test database is cloned from.
* ``postgresql`` -- pytest-postgresql's per-test psycopg connection to a fresh,
  empty database cloned from the template (dropped after the test).
* ``pg_conn`` -- the same connection, switched to autocommit.
* ``pg_dbname`` / ``pg_url`` -- that database's name and SQLAlchemy URL
  (``postgresql+psycopg://postgres@127.0.0.1:<port>/<db>``).
* ``make_project`` -- factory ``(template="generic", url=None, name="project")``
  returning a :class:`support.project.Project` with what the real ``alembic init`` writes (run
  once per template and process, then copied: :func:`support.project.alembic_init`).
* ``project`` -- ``make_project()`` with the defaults.
* ``backend`` / ``backend_url`` -- a test using them runs once per database (``postgresql``,
  ``mysql``, ``sqlite``) on a fresh, empty one: ``pg_url``, ``mysql_url`` or ``tmp_path / "db.sqlite"``.
* ``redis_server_url`` (session) / ``redis_url`` -- the test redis-server
  (``FENCEMIGRATE_TEST_REDIS_URL``, started by ``bash .ci/test``; a pytest-xdist worker's own
  server); ``redis_url`` is emptied with FLUSHALL for each test. A missing server fails those tests.
* ``mysql_server_url`` (session) -- the test MariaDB server's URL without a database
  (``FENCEMIGRATE_TEST_MYSQL_URL``, started by ``bash .ci/test``); a missing server fails
  those tests. ``mysql_url`` -- a fresh, empty database ``fm_test_<pid>_<n>`` on it
  (``mysql+pymysql://fencemigrate:fencemigrate@127.0.0.1:<port>/<db>``), dropped after the
  test; ``mariadb_url`` -- the same database as ``mariadb+pymysql://...``. Pass either to
  ``make_project(url=...)``; ``support.mysql_server.mysql_rows`` queries it.
"""

from __future__ import annotations

import compileall
import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import settings
from pytest_postgresql import factories

import fencemigrate

# Make `from support.xxx import ...` work however pytest is invoked.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.db import execute, query  # noqa: E402
from support.pg import PgServer, PgServerUnavailable, server_from_env, wait_until_reachable  # noqa: E402
from support.pg_roles import MakeRole  # noqa: E402
from support.project import MakeProject, Project, create_project, sqlite_url  # noqa: E402

# Database tests talk to a real server: wall-clock deadlines only cause flakiness.
settings.register_profile("fencemigrate", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fencemigrate"))


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile fencemigrate once: the commands under test run in subprocesses that never write
    bytecode (``PYTHONDONTWRITEBYTECODE``, see support.project), so each would compile it again."""
    compileall.compile_dir(Path(fencemigrate.__file__).parent, quiet=1)


# pytest-postgresql takes host/port when the fixture factory is called, i.e. now.
# If the variables are missing, placeholders are used: `pg_server` stops the run
# with an explanation before anything connects.
try:
    _SERVER: PgServer | None = server_from_env()
except PgServerUnavailable:
    _SERVER = None

# Database names are per pytest process, so runs sharing one server (or leftovers
# of a killed run) cannot collide. pytest-postgresql appends the xdist worker id.
_DBNAME = f"fm_test_{os.getpid()}"

# Role names of `make_role`, unique per pytest process like the database names.
_ROLE_NUMBERS = itertools.count(1)

_postgresql_noproc_raw = factories.postgresql_noproc(
    host=_SERVER.host if _SERVER else "127.0.0.1",
    port=_SERVER.port if _SERVER else 1,
    user=_SERVER.user if _SERVER else "postgres",
    dbname=_DBNAME,
)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The test PostgreSQL server; stops the whole run (exit 3) if unset or unreachable. Its tests
    share it, so none may restart it: the run errors if its start time changed meanwhile."""
    try:
        server = server_from_env()
        wait_until_reachable(server)
    except PgServerUnavailable as exc:
        pytest.exit(f"PostgreSQL for the tests is unavailable: {exc}", returncode=3)
    started = query(server.url("postgres"), _START_TIME)
    yield server
    restarted = query(server.url("postgres"), _START_TIME)
    assert restarted == started, (
        "the shared PostgreSQL server was restarted during the run; a test that restarts a server "
        "or changes its settings must use one of its own (support.replication.own_server)"
    )


_START_TIME = "SELECT pg_postmaster_start_time()"


@pytest.fixture(scope="session")
def postgresql_noproc(pg_server: PgServer, request: pytest.FixtureRequest) -> Any:
    """pytest-postgresql ``NoopExecutor`` for ``pg_server``, with its template database created.

    Overrides the plugin's default ``postgresql_noproc`` (which would use
    127.0.0.1:5432) so that nothing can reach a server other than ours.
    """
    return request.getfixturevalue("_postgresql_noproc_raw")


# Per-test database cloned from the template; overrides the plugin's
# `postgresql` fixture, which would otherwise try to launch its own server.
postgresql = factories.postgresql("postgresql_noproc")


@pytest.fixture
def pg_conn(postgresql: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Autocommit psycopg connection to this test's fresh database."""
    postgresql.autocommit = True
    return postgresql


@pytest.fixture
def pg_dbname(postgresql: psycopg.Connection[Any]) -> str:
    """Name of this test's fresh database."""
    return str(postgresql.info.dbname)


@pytest.fixture
def pg_url(pg_server: PgServer, pg_dbname: str) -> str:
    """SQLAlchemy URL of this test's database: ``postgresql+psycopg://postgres@host:port/db``."""
    return pg_server.url(pg_dbname)


@pytest.fixture
def make_project(tmp_path: Path, request: pytest.FixtureRequest) -> MakeProject:
    """Factory creating real Alembic projects (``alembic init -t <template>``) in ``tmp_path``.

    ``url`` defaults to this test's PostgreSQL database (created only when needed). Call it
    several times with different ``name`` values for several projects.
    """

    def make(template: str | Path = "generic", url: str | None = None, name: str = "project") -> Project:
        """Create the project ``tmp_path / name``."""
        return create_project(tmp_path / name, url or request.getfixturevalue("pg_url"), template)

    return make


@pytest.fixture
def project(make_project: MakeProject) -> Project:
    """A "generic"-template Alembic project pointing at this test's database."""
    return make_project()


#: The databases a backend-parametrised test runs on (the ``backend`` fixture's parameters).
BACKENDS = ("postgresql", "mysql", "sqlite")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend of a test that runs once per database. Narrow it for one test with
    ``@pytest.mark.parametrize("backend", ["sqlite", "mysql"], indirect=True)``."""
    return str(request.param)


@pytest.fixture
def backend_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of ``backend``: ``pg_url``, ``mysql_url`` or the SQLite file ``tmp_path/db.sqlite``."""
    if backend == "sqlite":
        return sqlite_url(tmp_path / "db.sqlite")
    return str(request.getfixturevalue("pg_url" if backend == "postgresql" else "mysql_url"))


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    """URL of the test redis-server (``FENCEMIGRATE_TEST_REDIS_URL``, set by ``bash .ci/test``).

    Fails every test that needs it when the variable is unset or the server does not answer:
    Redis tests are never skipped. Under pytest-xdist each worker gets a server of its own (started
    through ``.ci/redis`` like the shared one), since the tests empty their server with FLUSHALL.
    """
    from support.redis_server import PrivateRedis, RedisUnavailable, redis_url_from_env

    try:
        url = redis_url_from_env()
    except RedisUnavailable as exc:
        pytest.fail(f"Redis for the tests is unavailable: {exc}", pytrace=False)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield url
        return
    with PrivateRedis() as private:
        yield private.url


@pytest.fixture
def redis_url(redis_server_url: str) -> str:
    """The test redis-server's URL, emptied (FLUSHALL) for this test."""
    from support.redis_server import flush_all

    flush_all(redis_server_url)
    return redis_server_url


@pytest.fixture(scope="session")
def mysql_server_url() -> str:
    """URL of the test MariaDB server without a database (``FENCEMIGRATE_TEST_MYSQL_URL``).

    Fails every test that needs it when the variable is unset or the server does not answer:
    MySQL/MariaDB tests are never skipped.
    """
    from support.mysql_server import MysqlUnavailable, mysql_server_url_from_env

    try:
        return mysql_server_url_from_env()
    except MysqlUnavailable as exc:
        pytest.fail(f"MariaDB for the tests is unavailable: {exc}", pytrace=False)


@pytest.fixture
def mysql_url(mysql_server_url: str) -> Iterator[str]:
    """A fresh, empty database for this test: ``mysql+pymysql://fencemigrate:...@127.0.0.1:<port>/<db>``.

    Dropped after the test, killing any connection still using it.
    """
    from support.mysql_server import create_test_database, drop_test_database

    url = create_test_database(mysql_server_url)
    yield url
    drop_test_database(url)


@pytest.fixture
def mariadb_url(mysql_url: str) -> str:
    """This test's ``mysql_url`` database through SQLAlchemy's MariaDB dialect (``mariadb+pymysql://``)."""
    from support.mysql_server import as_mariadb_url

    return as_mariadb_url(mysql_url)


@pytest.fixture
def make_role(pg_server: PgServer, pg_dbname: str, pg_url: str) -> Iterator[MakeRole]:
    """Factory of non-superuser login roles, unique per test, that may create schemas and tables in
    the test database; what they own there goes with them after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"fm_role_{os.getpid()}_{next(_ROLE_NUMBERS)}"
        execute(pg_url, f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB')
        execute(pg_url, f'GRANT CREATE, CONNECT ON DATABASE "{pg_dbname}" TO "{name}"')
        execute(pg_url, f'GRANT ALL ON SCHEMA public TO "{name}"')
        made.append(name)
        return name

    yield make
    for name in made:
        execute(pg_url, f'DROP OWNED BY "{name}" CASCADE')
        execute(pg_url, f'DROP ROLE "{name}"')

"""The MariaDB server the MySQL/MariaDB tests run against, one fresh database per test.

``.ci/test`` starts a throwaway server (``.ci/mariadb``) and exports
``FENCEMIGRATE_TEST_MYSQL_URL``, the server's SQLAlchemy URL without a database
(``mysql+pymysql://fencemigrate:fencemigrate@127.0.0.1:PORT``). There is deliberately no
fallback: a missing or unreachable server is an error.

Every helper takes a SQLAlchemy URL (``mysql+pymysql://`` or ``mariadb+pymysql://``) and opens
its own short-lived autocommit PyMySQL connection, so it sees whatever other processes have
committed and holds no locks afterwards.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pymysql
from pymysql.constants import ER
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

URL_VAR = "FENCEMIGRATE_TEST_MYSQL_URL"

#: Seconds a DROP DATABASE waits for a table lock held by a leftover connection before failing.
DROP_LOCK_WAIT_SECONDS = 30

Params = Sequence[Any] | Mapping[str, Any] | None

_database_numbers = itertools.count(1)


class MysqlUnavailable(RuntimeError):
    """The test MariaDB server is not configured or not reachable."""


def mysql_server_url_from_env() -> str:
    """The test server's URL; MysqlUnavailable with an explanation when it is unset, malformed or not reachable."""
    url = os.environ.get(URL_VAR, "").strip()
    if not url:
        raise MysqlUnavailable(
            f"{URL_VAR} must point at a MariaDB server (mysql+pymysql://fencemigrate:fencemigrate@127.0.0.1:PORT, "
            "no database). Run the tests with `bash .ci/test [pytest args]`, which starts a throwaway server and "
            'sets it, or start one yourself with `eval "$(bash .ci/mariadb start)"` and export '
            f"{URL_VAR}=mysql+pymysql://fencemigrate:fencemigrate@127.0.0.1:$MYSQL_PORT."
        )
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise MysqlUnavailable(f"{URL_VAR}={url!r} is not a SQLAlchemy URL: {error}") from None
    if parsed.get_backend_name() not in ("mysql", "mariadb") or parsed.database:
        raise MysqlUnavailable(f"{URL_VAR}={url!r} must be a mysql+pymysql:// URL without a database")
    wait_until_reachable(url)
    return url


def connect(url: str) -> pymysql.connections.Connection[Any]:
    """Open an autocommit PyMySQL connection to ``url`` (caller closes it, e.g. with ``with``)."""
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "",
        password=parsed.password or "",
        database=parsed.database,
        autocommit=True,
        charset="utf8mb4",
        connect_timeout=5,
    )


def wait_until_reachable(url: str, attempts: int = 20) -> None:
    """Connect to ``url`` until it works; MysqlUnavailable after ``attempts`` tries 0.25 s apart."""
    for attempt in range(attempts):
        try:
            with connect(url):
                return
        except pymysql.err.OperationalError as error:
            if attempt == attempts - 1:
                shown = make_url(url).render_as_string(hide_password=True)
                raise MysqlUnavailable(f"no MariaDB server answers at {shown}: {error}") from None
            time.sleep(0.25)


def mysql_rows(url: str, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
    """Run one statement in autocommit mode and return its rows (``[]`` when it returns none).

    ``params`` uses PyMySQL placeholders (``%s`` / ``%(name)s``); with ``params=None`` the SQL
    is sent as is (a literal ``%`` needs no escaping).
    """
    with connect(url) as conn, conn.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description is not None else []


def mysql_table_names(url: str) -> list[str]:
    """Return the sorted names of the base tables in ``url``'s database."""
    rows = mysql_rows(
        url,
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' ORDER BY table_name",
    )
    return [row[0] for row in rows]


def database_url(server_url: str, database: str) -> str:
    """``server_url`` naming ``database``: ``mysql+pymysql://user:password@host:port/database``."""
    return make_url(server_url).set(database=database).render_as_string(hide_password=False)


def as_mariadb_url(url: str) -> str:
    """The same URL with SQLAlchemy's MariaDB dialect: ``mysql+pymysql://`` -> ``mariadb+pymysql://``."""
    parsed = make_url(url)
    return parsed.set(drivername=f"mariadb+{parsed.get_driver_name()}").render_as_string(hide_password=False)


def _quoted_name(database: str) -> str:
    """``database`` as a backquoted identifier; only the names this module makes are accepted."""
    assert re.fullmatch(r"fm_test_[0-9]+_[0-9]+", database), f"not a test database name: {database!r}"
    return f"`{database}`"


def create_test_database(server_url: str) -> str:
    """Create the empty database ``fm_test_<pid>_<n>`` on ``server_url`` and return its URL."""
    database = f"fm_test_{os.getpid()}_{next(_database_numbers)}"
    with connect(server_url) as conn, conn.cursor() as cursor:
        # A run killed earlier may have left a database of the same name (pids are reused).
        cursor.execute(f"DROP DATABASE IF EXISTS {_quoted_name(database)}")
        cursor.execute(f"CREATE DATABASE {_quoted_name(database)}")
    return database_url(server_url, database)


def drop_test_database(url: str) -> None:
    """Drop ``url``'s database after killing every other connection still using it.

    A leftover connection (a pool a test did not dispose of, a child process that has not
    exited) can hold a table lock that would block DROP DATABASE forever; once the test is over
    all of them are leftovers. The DROP itself waits at most DROP_LOCK_WAIT_SECONDS.
    """
    parsed: URL = make_url(url)
    database = parsed.database or ""
    server_url = parsed.set(database=None).render_as_string(hide_password=False)
    with connect(server_url) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
            (database,),
        )
        for (connection_id,) in cursor.fetchall():
            try:
                cursor.execute("KILL CONNECTION %s", (connection_id,))
            except pymysql.err.OperationalError as error:
                if error.args[0] != ER.NO_SUCH_THREAD:  # it ended on its own meanwhile
                    raise
        cursor.execute("SET SESSION lock_wait_timeout = %s", (DROP_LOCK_WAIT_SECONDS,))
        cursor.execute(f"DROP DATABASE IF EXISTS {_quoted_name(database)}")

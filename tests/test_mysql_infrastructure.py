"""The MariaDB test fixtures work, and plain Alembic on MariaDB is not atomic (none of this imports fencemigrate)."""

from __future__ import annotations

import pymysql
import pytest
from sqlalchemy.engine import make_url
from support.mysql_server import (
    as_mariadb_url,
    connect,
    create_test_database,
    drop_test_database,
    mysql_rows,
    mysql_table_names,
)
from support.project import MakeProject, Project

# Databases seen by the two "fresh database" runs, in order.
_seen_databases: list[str] = []


def _database_exists(server_url: str, database: str) -> bool:
    """Tell whether the server has a database called ``database``."""
    rows = mysql_rows(server_url, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (database,))
    return rows == [(1,)]


def test_the_server_is_mariadb_on_localhost_with_the_test_account(mysql_server_url: str, mysql_url: str) -> None:
    """The URLs name the fencemigrate account on 127.0.0.1; the server is MariaDB and grants it everything."""
    server = make_url(mysql_server_url)
    assert (server.drivername, server.host, server.database) == ("mysql+pymysql", "127.0.0.1", None)
    database = make_url(mysql_url).database
    assert database is not None
    assert mysql_url == f"mysql+pymysql://fencemigrate:fencemigrate@127.0.0.1:{server.port}/{database}"

    [(version, user, current_database)] = mysql_rows(mysql_url, "SELECT VERSION(), CURRENT_USER(), DATABASE()")
    assert "MariaDB" in version
    assert (user, current_database) == ("fencemigrate@127.0.0.1", database)
    [(grant,)] = mysql_rows(mysql_url, "SHOW GRANTS")
    assert grant.startswith("GRANT ALL PRIVILEGES ON *.* TO `fencemigrate`@`127.0.0.1`")
    assert grant.endswith("WITH GRANT OPTION")
    # params=None sends the SQL verbatim; params use PyMySQL placeholders.
    assert mysql_rows(mysql_url, "SELECT '100%'") == [("100%",)]
    assert mysql_rows(mysql_url, "SELECT %s + 1", (41,)) == [(42,)]


def test_mariadb_url_is_the_same_database_through_the_mariadb_dialect(mysql_url: str, mariadb_url: str) -> None:
    """Only the scheme differs."""
    assert mariadb_url == "mariadb+pymysql://" + mysql_url.removeprefix("mysql+pymysql://")
    assert as_mariadb_url(mysql_url) == mariadb_url


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_gets_a_fresh_empty_database_dropped_afterwards(
    run: int, mysql_server_url: str, mysql_url: str
) -> None:
    """Both runs find an empty database of their own; the earlier run's database is gone."""
    database = make_url(mysql_url).database
    assert database is not None
    assert database.startswith("fm_test_")
    assert mysql_table_names(mysql_url) == []
    assert all(not _database_exists(mysql_server_url, earlier) for earlier in _seen_databases)
    assert database not in _seen_databases
    _seen_databases.append(database)
    # Leave something behind: the other run must not see it.
    mysql_rows(mysql_url, "CREATE TABLE leftover (id int)")
    assert mysql_table_names(mysql_url) == ["leftover"]


def test_dropping_a_test_database_kills_a_connection_that_would_block_it(mysql_server_url: str) -> None:
    """A leftover open transaction holding a table's metadata lock does not stop the drop: it is killed."""
    url = create_test_database(mysql_server_url)
    database = make_url(url).database
    assert database is not None
    mysql_rows(url, "CREATE TABLE held (id int)")
    with connect(url) as leftover, leftover.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT COUNT(*) FROM held")  # holds the table's metadata lock until COMMIT
        drop_test_database(url)
        assert not _database_exists(mysql_server_url, database)
        with pytest.raises(pymysql.err.OperationalError, match="Lost connection|server has gone away"):
            cursor.execute("SELECT 1")


def _two_revision_chain(project: Project) -> None:
    """Add revisions a1 (creates `widgets`) and b2 (creates `gadgets`, alters `widgets`, inserts a row)."""
    project.add_revision(
        "a1",
        None,
        "CREATE TABLE widgets (id int AUTO_INCREMENT PRIMARY KEY, name varchar(100) NOT NULL)",
        "DROP TABLE widgets",
        slug="widgets",
    )
    project.add_revision(
        "b2",
        "a1",
        ["CREATE TABLE gadgets (id int PRIMARY KEY)", "ALTER TABLE widgets ADD COLUMN size int"],
        ["ALTER TABLE widgets DROP COLUMN size", "DROP TABLE gadgets"],
        slug="gadgets",
        extra_upgrade_code="""
            bind = op.get_bind()
            bind.execute(sa.text("INSERT INTO gadgets VALUES (1)"))
        """,
    )


@pytest.mark.parametrize("url_fixture", ["mysql_url", "mariadb_url"])
def test_plain_alembic_upgrades_and_downgrades_a_two_revision_chain(
    url_fixture: str, make_project: MakeProject, request: pytest.FixtureRequest
) -> None:
    """A generic project pointing at MariaDB (either dialect) upgrades to head and back to base."""
    url: str = request.getfixturevalue(url_fixture)
    project = make_project(url=url)
    assert f"sqlalchemy.url = {url}\n" in project.ini.read_text()
    _two_revision_chain(project)

    result = project.run_alembic("upgrade", "head").check()
    assert "Running upgrade a1 -> b2" in result.stderr
    assert mysql_table_names(url) == ["alembic_version", "gadgets", "widgets"]
    assert mysql_rows(url, "SELECT version_num FROM alembic_version") == [("b2",)]
    assert mysql_rows(url, "SELECT id FROM gadgets") == [(1,)]
    assert [row[0] for row in mysql_rows(url, "SHOW COLUMNS FROM widgets")] == ["id", "name", "size"]

    project.run_alembic("downgrade", "base").check()
    assert mysql_table_names(url) == ["alembic_version"]
    assert mysql_rows(url, "SELECT version_num FROM alembic_version") == []


def test_plain_alembic_on_mariadb_keeps_the_ddl_of_a_failing_revision(
    make_project: MakeProject, mysql_url: str
) -> None:
    """The control: MariaDB commits each DDL statement, so a revision failing at its second statement
    leaves its first one applied while alembic_version still names the previous revision.

    This is why pre-check mode records a revision as in progress (dirty) before running it.
    """
    project = make_project(url=mysql_url)
    project.add_revision("a1", None, "CREATE TABLE widgets (id int PRIMARY KEY)", "DROP TABLE widgets", slug="widgets")
    project.add_revision(
        "b2",
        "a1",
        ["CREATE TABLE half_done (id int PRIMARY KEY)", "INSERT INTO no_such_table VALUES (1)"],
        "DROP TABLE half_done",
        slug="fails",
    )

    result = project.run_alembic("upgrade", "head").check(1)
    assert "Running upgrade a1 -> b2" in result.stderr
    assert f"Table '{make_url(mysql_url).database}.no_such_table' doesn't exist" in result.stderr
    # The failed revision's CREATE TABLE stays; the version table says b2 never ran.
    assert mysql_table_names(mysql_url) == ["alembic_version", "half_done", "widgets"]
    assert mysql_rows(mysql_url, "SELECT version_num FROM alembic_version") == [("a1",)]

    # Running it again fails differently: the half-applied revision cannot simply be retried.
    retry = project.run_alembic("upgrade", "head").check(1)
    assert "Table 'half_done' already exists" in retry.stderr
    assert mysql_rows(mysql_url, "SELECT version_num FROM alembic_version") == [("a1",)]

"""Relative revisions (``-1``, ``+1``, ``base+2``, ``head-1``, ``main@-1``) through the command line,
against plain ``alembic`` on the same chain in a second database, on PostgreSQL, MariaDB and SQLite.

Each form is given to ``fencemigrate`` with its options before or after the revision, and to
``alembic`` with none; after each, both databases must have the same version table and the same
tables. ``-1`` used to be click's "No such option '-1'"; a misspelt option still is a usage error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from support.pg import PgServer
from support.project import MakeProject, Project, sqlite_url

TOKEN = "5"

# (fencemigrate's arguments, alembic's arguments, the version table afterwards; None: Alembic
# refuses the form, as `stamp` does every relative revision, and fencemigrate refuses it too)
FORMS: list[tuple[list[str], list[str], list[str] | None]] = [
    (["upgrade", "+1", "--token", TOKEN], ["upgrade", "+1"], ["r01"]),
    (["upgrade", "--token", TOKEN, "+2"], ["upgrade", "+2"], ["r03"]),
    (["downgrade", "base+2", "--token", TOKEN], ["downgrade", "base+2"], ["r02"]),
    (["upgrade", "head", "--token", TOKEN], ["upgrade", "head"], ["r05"]),
    (["downgrade", "--token", TOKEN, "head-1"], ["downgrade", "head-1"], ["r04"]),
    (["downgrade", "main@-1", "--token", TOKEN], ["downgrade", "main@-1"], ["r03"]),
    (["stamp", "-1", "--token", TOKEN], ["stamp", "-1"], None),
    (["stamp", "--token", TOKEN, "+1"], ["stamp", "+1"], None),
    (["downgrade", "-1", "--token", TOKEN, "--json"], ["downgrade", "-1"], ["r02"]),
    (["downgrade", "--token", TOKEN, "-1"], ["downgrade", "-1"], ["r01"]),
    (["upgrade", "+1", "--token", TOKEN], ["upgrade", "+1"], ["r02"]),
    (["downgrade", "-2", "--token", TOKEN], ["downgrade", "-2"], []),
]


@pytest.fixture(params=["postgresql", "mariadb", "sqlite"])
def two_databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two empty databases of one backend: one for fencemigrate, one for the plain alembic control."""
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "fenced.db"), sqlite_url(tmp_path / "control.db")
    elif request.param == "postgresql":
        server: PgServer = request.getfixturevalue("pg_server")
        admin: psycopg.Connection[Any] = request.getfixturevalue("pg_conn")
        name = f"{request.getfixturevalue('pg_dbname')}_control"
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield request.getfixturevalue("pg_url"), server.url(name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    else:
        from support.mysql_server import as_mariadb_url, create_test_database, drop_test_database

        control = create_test_database(request.getfixturevalue("mysql_server_url"))
        try:
            yield request.getfixturevalue("mariadb_url"), as_mariadb_url(control)
        finally:
            drop_test_database(control)


def _chain(project: Project) -> None:
    """r01 .. r05 on the branch labelled ``main``, each creating its table t01 .. t05."""
    for number in range(1, 6):
        project.add_revision(
            f"r{number:02d}",
            f"r{number - 1:02d}" if number > 1 else None,
            f"CREATE TABLE t{number:02d} (id int)",
            f"DROP TABLE t{number:02d}",
            slug=f"t{number:02d}",
            branch_labels="main" if number == 1 else None,
        )


def _database(url: str) -> tuple[list[str], list[str]]:
    """The version table's rows and the chain's tables (t01 .. t05) of the database at ``url``."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            names = sa.inspect(connection).get_table_names()
            versions = (
                sorted(connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())
                if "alembic_version" in names
                else []
            )
        return versions, sorted(name for name in names if re.fullmatch(r"t\d\d", name))
    finally:
        engine.dispose()


def test_relative_revisions_as_alembic(make_project: MakeProject, two_databases: tuple[str, str]) -> None:
    """Every relative form moves fencemigrate's database as it moves plain alembic's."""
    fenced_url, control_url = two_databases
    fenced, control = make_project(url=fenced_url, name="fenced"), make_project(url=control_url, name="control")
    _chain(fenced)
    _chain(control)
    expected: tuple[list[str], list[str]] = ([], [])
    for fenced_args, control_args, versions in FORMS:
        fenced_result, control_result = fenced.run_cli(*fenced_args), control.run_alembic(*control_args)
        if versions is None:
            message = f"Can't locate revision identified by '{control_args[-1]}'"
            assert control_result.code == 255 and f"FAILED: {message}" in control_result.stdout, control_result
            assert fenced_result.code == 2 and f"fencemigrate: usage: {message}\n" in fenced_result.stderr, (
                fenced_result
            )
        else:
            fenced_result.check()
            control_result.check()
            expected = (versions, sorted(_tables(versions)))
        assert _database(control_url) == expected, f"alembic {' '.join(control_args)}"
        assert _database(fenced_url) == expected, f"fencemigrate {' '.join(fenced_args)}"


def _tables(versions: list[str]) -> set[str]:
    """The tables a database at ``versions`` (one head on the chain, or none) has."""
    top = int(versions[0][1:]) if versions else 0
    return {f"t{number:02d}" for number in range(1, top + 1)}


def test_misspelt_option_before_a_relative_revision_is_a_usage_error(tmp_path: Path, make_project: MakeProject) -> None:
    """`downgrade --tokn 5 -1`: click's own "No such option", exit 2, and the database untouched."""
    project = make_project(url=sqlite_url(tmp_path / "db.sqlite"))
    _chain(project)
    project.run_cli("upgrade", "head", "--token", TOKEN).check()

    result = project.run_cli("downgrade", "--tokn", TOKEN, "-1").check(2)

    assert result.stdout == ""
    assert result.stderr == (
        "Usage: fencemigrate downgrade [OPTIONS] REVISION\n"
        "Try 'fencemigrate downgrade --help' for help.\n\n"
        "Error: No such option '--tokn'. (Did you mean one of: '--json', '--token'?)\n"
    )
    assert _database(project.url) == (["r05"], ["t01", "t02", "t03", "t04", "t05"])

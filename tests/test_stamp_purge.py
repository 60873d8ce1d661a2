"""``stamp --purge``: Alembic's meaning (the version table is emptied first, whatever its rows
name), fenced like any stamp, with the ledger emptied beside the version table, on PostgreSQL,
MariaDB and SQLite. A stale token's purge is FENCED and leaves the version table as it was; the
control, plain ``alembic stamp --purge``, empties it whatever token its writer's lease had.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from support.project import MakeProject, Project, sqlite_url


@pytest.fixture(params=["postgresql", "mariadb", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each backend."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "db.sqlite")
    return str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "mariadb_url"))


def _versions(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return sorted(connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())
    finally:
        engine.dispose()


def _add_version_row(url: str, revision: str) -> None:
    """A version row no revision file has (a file deleted since): what --purge exists for."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": revision})
    finally:
        engine.dispose()


def _unreconciled(project: Project) -> list[str]:
    state = project.run_cli("state").check().stdout
    return [line for line in state.splitlines() if line.startswith(("NOT IN LEDGER", "NOT IN VERSION TABLE"))]


def test_stamp_purge_is_fenced_and_leaves_the_ledger_consistent(make_project: MakeProject, url: str) -> None:
    project = make_project(url=url)
    project.add_chain(5)
    project.run_cli("upgrade", "head", "--token", "5").check()
    # Written behind fencemigrate's back: the version table at r02 plus a row for a revision file
    # that is gone; the ledger still records r01 .. r05.
    project.allow_tokenless_writes()
    project.run_alembic("stamp", "r02").check()
    _add_version_row(url, "gone")
    assert _unreconciled(project) == [
        "NOT IN LEDGER: gone is applied by alembic_version but has no ledger row (written without a fencing token)"
    ]

    stale = project.run_cli("stamp", "--purge", "r04", "--token", "4").check(3)
    assert "\nFENCED: you no longer own db/migrations.\n" in stale.stderr, stale
    assert _versions(url) == ["gone", "r02"]

    purged = project.run_cli("stamp", "r03", "--purge", "--token", "6", "--json").check()
    assert '"command": "stamp"' in purged.stdout and '"heads": ["r03"]' in purged.stdout, purged
    assert _versions(url) == ["r03"]
    assert _unreconciled(project) == []
    ledger = [
        line.split()[0]
        for line in project.run_cli("state").stdout.split("ledger (alembic_version):\n")[1].splitlines()
        if line.startswith("  r")
    ]
    assert ledger == ["r01", "r02", "r03"]

    # The control: plain alembic, which has no token to be stale with, purges whatever it is told.
    _add_version_row(url, "gone")
    project.run_alembic("stamp", "--purge", "r01").check()
    assert _versions(url) == ["r01"]


def test_stamp_purge_refuses_sql_as_alembic_does(tmp_path: Path, make_project: MakeProject) -> None:
    """Alembic: "Can't use --purge with --sql mode"; fencemigrate says so before anything runs."""
    project = make_project(url=sqlite_url(tmp_path / "db.sqlite"))
    project.add_chain(1)
    control = project.run_alembic("stamp", "--purge", "--sql", "r01")
    assert control.code == 255 and "FAILED: Can't use --purge with --sql mode" in control.stdout, control

    result = project.run_cli("stamp", "--purge", "--sql", "r01", "--token", "5").check(2)

    assert result.stdout == ""
    assert result.stderr == "fencemigrate: usage: Can't use --purge with --sql mode\n"
    assert not (tmp_path / "db.sqlite").exists()

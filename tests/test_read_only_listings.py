"""``history -i``, ``history -r X:current``, ``show current`` and ``current`` only read: on a fenced
database without a version table they print Alembic's text and create nothing, where plain Alembic
(the control) creates the version table; and they refuse a password's unencoded ``@`` first."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from support.project import MakeProject, Project, sqlite_url

READS = (
    ("history", "-i"),
    ("history", "-r", "a1:current"),
    ("history", "--rev-range=current:", "--verbose"),
    ("show", "current"),
    ("current",),
)
PERCENT_40 = (
    "sqlalchemy.url: its password has an '@' that is not percent-encoded, so SQLAlchemy would take "
    "part of it for the host; write '@' as %40 (and ':' as %3A, a space as %20, '%' as %25)"
)


def _has_version_table(url: str) -> bool:
    engine = sa.create_engine(url)
    try:
        return sa.inspect(engine).has_table("alembic_version")
    finally:
        engine.dispose()


def _drop_version_table(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("DROP TABLE alembic_version"))
    finally:
        engine.dispose()


def _revisions(project: Project) -> None:
    project.add_revision("a1", None, "CREATE TABLE a1 (id int)", slug="a1")
    project.add_revision("a2", "a1", "CREATE TABLE a2 (id int)", slug="a2")


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_reads_create_no_version_table(backend: str, tmp_path: Path, make_project: MakeProject) -> None:
    """Fence schema installed, version table dropped: fencemigrate prints what Alembic prints and
    leaves the table missing; Alembic's history -i, history -r X:current and show current create it."""
    project = make_project(url=sqlite_url(tmp_path / "db.sqlite") if backend == "sqlite" else None)
    url = project.url
    _revisions(project)
    project.run_cli("install").check()
    _drop_version_table(url)

    fenced = {args: project.run_cli(*args).check().stdout for args in READS}
    assert not _has_version_table(url)
    assert fenced[("history", "-i")].count("\n") == 2 and fenced[("history", "-r", "a1:current")]

    for args in READS:
        assert project.run_alembic(*args).check().stdout == fenced[args], args
    assert _has_version_table(url)  # the control: plain Alembic created it


def test_reads_create_no_sqlite_file(tmp_path: Path, make_project: MakeProject) -> None:
    """A missing SQLite file is an error, not created."""
    database = tmp_path / "missing.sqlite"
    project = make_project(url=sqlite_url(database))
    _revisions(project)
    for args in READS:
        assert project.run_cli(*args).code != 0, args
        assert not database.exists(), args


@pytest.mark.parametrize("args", READS)
def test_unencoded_at_in_the_password_is_refused(args: tuple[str, ...], make_project: MakeProject) -> None:
    """Refused before connecting: exit 2, the "%40" message, no part of the password."""
    project = make_project(url="postgresql+psycopg://bob:pw@ss@127.0.0.1:1/x")
    _revisions(project)
    result = project.run_cli(*args)
    assert result.code == 2, result
    assert result.stderr.splitlines()[-1].endswith(PERCENT_40), result
    assert "ss@" not in result.stdout + result.stderr.replace(PERCENT_40, ""), result

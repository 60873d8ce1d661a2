"""Bad usage never touches the database; an unknown revision is bad usage from every command.

A fenced command whose revision cannot be resolved (``upgrade head`` among two heads, ``downgrade
-1`` at a merge point, Alembic's "Ambiguous walk", a relative revision that walks off the graph)
exits 2 before any grant, fence install or lock: every table of the database has exactly the rows
it had (the lease row, the fence token, the event log: no GRANT or RELEASE), and a fresh database
gets no fence schema (a fresh SQLite file is not even created). Until the resolution moved before
the grant, ``upgrade head`` on a fresh database with two heads installed the fence schema and logged
a GRANT and a RELEASE before exiting 2.

An unknown revision exits 2 from every command that names one (``show`` and ``history`` exited 1),
the message being Alembic's own (``Can't locate revision identified by 'nosuchrev'``): scripts grep
for it. The control: plain ``alembic`` prints the same words, with its exit status 255.

A revision counted from the database's heads (``downgrade -1``) is resolved from the heads read
before the run's lease: when another writer moves them while the run waits, the run is FENCED,
where it used to count again from the new heads and roll back a revision its caller never saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support.in_process import run_in_process
from support.project import MakeProject, Project, Result, script_command, sqlite_url, start_process

import fencemigrate
from fencemigrate.errors import UsageError

UNKNOWN = "Can't locate revision identified by 'nosuchrev'"
TWO_HEADS = (
    "Multiple head revisions are present for given argument 'head'; please specify a specific target "
    "revision, '<branchname>@head' to narrow to a specific head, or 'heads' for all heads"
)
STAMP_TWO_HEADS = "Multiple heads are present; please specify a single target revision"

Rows = dict[str, list[str]] | None


@dataclass
class Database:
    """A project on one database, and every row of that database (None: a SQLite file that does not exist)."""

    project: Project
    rows: Callable[[], Rows]


def _rows(url: str, schemas: tuple[str | None, ...]) -> dict[str, list[str]]:
    """Every row of every table in ``schemas`` (None: the default one), as sorted text."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            inspector = sa.inspect(connection)
            found: dict[str, list[str]] = {}
            for schema in schemas:
                if schema is not None and schema not in inspector.get_schema_names():
                    continue
                for name in inspector.get_table_names(schema=schema):
                    table = sa.Table(name, sa.MetaData(), schema=schema, autoload_with=connection)
                    found[f"{schema}.{name}"] = sorted(repr(tuple(row)) for row in connection.execute(table.select()))
            return found
    finally:
        engine.dispose()


@pytest.fixture(params=["postgresql", "sqlite"])
def database(request: pytest.FixtureRequest, make_project: MakeProject, tmp_path: Path) -> Database:
    """An empty database of each kind (``mariadb`` too when a test asks for it), with a project
    whose revisions 002a and 002b both follow 0001: two heads."""
    if request.param == "sqlite":
        path = tmp_path / "db.sqlite"
        project = make_project(url=sqlite_url(path))
        rows: Callable[[], Rows] = lambda: _rows(project.url, (None,)) if path.exists() else None  # noqa: E731
    else:
        url = str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "mariadb_url"))
        project = make_project(url=url)
        schemas = (None, "fencemigrate") if request.param == "postgresql" else (None,)
        rows = lambda: _rows(url, schemas)  # noqa: E731
    project.add_revision("0001", None, "CREATE TABLE t0001 (id int)", "DROP TABLE t0001")
    for branch in ("002a", "002b"):
        project.add_revision(branch, "0001", f"CREATE TABLE t{branch} (id int)", f"DROP TABLE t{branch}")
    return Database(project, rows)


def add_merge(project: Project) -> None:
    """0003 merges 002a and 002b: one head again."""
    project.add_revision("0003", ("002a", "002b"), "CREATE TABLE t0003 (id int)", "DROP TABLE t0003")


def cli(project: Project, *args: str) -> Result:
    return run_in_process(project.path, *args)


def refused(result: Result, message: str) -> None:
    """Exit 2, and the message as one line (or the JSON object with ``--json``)."""
    assert result.code == 2, str(result)
    if "--json" in result.args:
        assert json.loads(result.stdout) == {"status": "usage", "message": message}, str(result)
    else:
        assert result.stderr.splitlines()[-1] == f"fencemigrate: usage: {message}", str(result)


# (what runs before, with a lease; the revision added before the command; the command; its message)
UNRESOLVABLE: dict[str, tuple[tuple[str, ...], bool, tuple[str, ...], str]] = {
    "head-of-two-fresh": ((), False, ("upgrade", "head"), TWO_HEADS),
    "head-of-two-fresh-json": ((), False, ("upgrade", "head", "--json"), TWO_HEADS),
    "head-of-two-fresh-token": ((), False, ("upgrade", "head", "--token", "5"), TWO_HEADS),
    "head-of-two-at-0001": (("upgrade", "0001"), False, ("upgrade", "head"), TWO_HEADS),
    "stamp-head-of-two": (("upgrade", "0001"), False, ("stamp", "head"), STAMP_TWO_HEADS),
    "plus-two-fresh": ((), False, ("upgrade", "+2"), "Ambiguous walk"),
    "minus-one-at-merge": (("upgrade", "head"), True, ("downgrade", "-1"), "Ambiguous walk"),
    "head-minus-one-at-merge": (("upgrade", "head"), True, ("downgrade", "head-1"), "Ambiguous walk"),
    "plus-one-at-head": (
        ("upgrade", "head"),
        True,
        ("upgrade", "+1"),
        "Relative revision +1 didn't produce 1 migrations",
    ),
    "unknown-fresh": ((), False, ("upgrade", "nosuchrev"), UNKNOWN),
    "unknown-relative": ((), False, ("upgrade", "nosuchrev+1"), UNKNOWN),
}


READS_HEADS = {"plus-two-fresh"}  # relative to the database's heads


@pytest.mark.parametrize("case", list(UNRESOLVABLE))
def test_an_unresolvable_revision_touches_nothing(database: Database, case: str) -> None:
    before_args, merged, args, message = UNRESOLVABLE[case]
    project = database.project
    if merged:
        add_merge(project)
    if before_args:
        cli(project, *before_args).check(0)
    before = database.rows()
    refused(cli(project, *args), message)
    if before is None and case in READS_HEADS:
        # Resolving it reads the heads: env.py's connection creates the SQLite file, as Alembic's does.
        assert database.rows() == {}
    else:
        assert database.rows() == before


@pytest.mark.parametrize("database", ["mariadb"], indirect=True)
def test_head_of_two_on_a_fresh_mariadb_touches_nothing(database: Database) -> None:
    refused(cli(database.project, "upgrade", "head"), TWO_HEADS)
    assert database.rows() == {}


# Every command that names a revision, the revision unknown.
UNKNOWN_REVISION_COMMANDS: list[tuple[str, ...]] = [
    ("upgrade", "nosuchrev"),
    ("upgrade", "nosuchrev", "--json"),
    ("upgrade", "nosuchrev", "--token", "5"),
    ("upgrade", "nosuchrev@head"),
    ("upgrade", "0001:nosuchrev", "--sql", "--token", "5"),
    ("upgrade", "nosuchrev:002a", "--sql", "--token", "5"),
    ("downgrade", "nosuchrev"),
    ("downgrade", "nosuchrev-1"),
    ("stamp", "nosuchrev"),
    ("stamp", "0001", "nosuchrev"),
    ("stamp", "nosuchrev", "--purge"),
    ("reapply", "nosuchrev", "--token", "5"),
    ("resolve", "nosuchrev", "--token", "5", "--as", "applied"),
    ("show", "nosuchrev"),
    ("show", "nosuchrev", "--json"),
    ("history", "-r", "nosuchrev:"),
    ("history", "-r", ":nosuchrev"),
    ("history", "-r", "nosuchrev:", "--json"),
    ("history", "-r", "nosuchrev:current"),
    ("history", "-r", "nosuchrev:", "-i"),
    ("edit", "nosuchrev"),
    ("merge", "002a", "nosuchrev"),
    ("revision", "-m", "x", "--head", "nosuchrev"),
]


def test_an_unknown_revision_is_bad_usage_from_every_command(database: Database) -> None:
    project = database.project
    cli(project, "upgrade", "0001").check(0)
    before, files = database.rows(), sorted(project.versions.iterdir())
    for args in UNKNOWN_REVISION_COMMANDS:
        refused(cli(project, *args), UNKNOWN)
        assert database.rows() == before, args
        assert sorted(project.versions.iterdir()) == files, args


@pytest.mark.parametrize(
    "call",
    [
        lambda config: fencemigrate.api.upgrade(config, "nosuchrev"),
        lambda config: fencemigrate.api.downgrade(config, "nosuchrev"),
        lambda config: fencemigrate.api.stamp(config, "nosuchrev"),
        lambda config: fencemigrate.api.show(config, "nosuchrev"),
        lambda config: fencemigrate.api.history(config, "nosuchrev:"),
    ],
    ids=["upgrade", "downgrade", "stamp", "show", "history"],
)
def test_the_api_raises_usage_in_alembics_words(database: Database, call: Callable[[Any], object]) -> None:
    config = fencemigrate.load_config([str(database.project.ini)])
    with pytest.raises(UsageError) as refusal:
        call(config)
    assert str(refusal.value) == UNKNOWN
    assert database.rows() is None or database.rows() == {}


@pytest.mark.parametrize(
    "args",
    [("upgrade", "nosuchrev"), ("show", "nosuchrev"), ("history", "-r", "nosuchrev:"), ("history", "-r", ":nosuchrev")],
)
def test_plain_alembic_words_it_the_same(database: Database, args: tuple[str, ...]) -> None:
    """The control: Alembic's own words (exit 255); fencemigrate keeps them with exit 2."""
    plain = database.project.run_alembic(*args)
    assert plain.code == 255 and f"FAILED: {UNKNOWN}\n" in plain.stdout, str(plain)
    refused(cli(database.project, *args), UNKNOWN)


def test_plain_alembic_words_head_of_two_the_same(database: Database) -> None:
    plain = database.project.run_alembic("upgrade", "head")
    assert plain.code == 255 and f"FAILED: {TWO_HEADS}\n" in plain.stdout, str(plain)


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_a_relative_revision_is_not_resolved_again_from_heads_that_moved(
    make_project: MakeProject, tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    """B's ``downgrade -1`` is resolved from the heads B read (0002) before it waits for the lease A
    holds; A upgrades to 0003 meanwhile. Granted, B is FENCED (heads are 0003, B planned from
    0002) and 0003 stays: before, B rolled back 0003, a revision it never saw."""
    url = sqlite_url(tmp_path / "db.sqlite") if kind == "sqlite" else str(request.getfixturevalue("pg_url"))
    project = make_project(url=url)
    project.add_chain(3)
    cli(project, "upgrade", "r02").check(0)
    granted = json.loads(cli(project, "lease", "acquire", "--holder", "A", "--ttl", "2m", "--json").check(0).stdout)
    b = start_process(
        [*script_command("fencemigrate"), "downgrade", "-1", "--holder", "B", "--wait", "2m"], project.path
    )
    try:
        assert b.stderr is not None
        line = "INFO"
        while line and not line.startswith("waiting for the lease"):  # env.py's logging comes first
            line = b.stderr.readline()
        assert line.startswith("waiting for the lease on db/migrations: held by A"), line
        cli(project, "upgrade", "head", "--token", str(granted["lease"]["token"]), "--holder", "A").check(0)
        cli(project, "lease", "release", "--holder", "A").check(0)
        out, err = b.communicate(timeout=120)
    finally:
        b.kill()
    assert b.returncode == 3, out + err
    assert "heads are r03, you planned from r02." in err, err
    heads = json.loads(cli(project, "current", "--json").check(0).stdout)["database_heads"]
    assert heads == ["r03"]

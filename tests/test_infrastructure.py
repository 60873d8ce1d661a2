"""The test fixtures and helpers themselves work (none of this imports fencemigrate)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.db import alembic_versions, column_names, query, schema_names, table_names
from support.pg import PgServer
from support.project import MakeProject, Project, script_command
from support.replication import StreamingPair, streaming_pair

# OIDs of the databases seen by the two "fresh database" tests.
_seen_database_oids: list[int] = []


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_gets_a_fresh_empty_database(run: int, pg_conn: psycopg.Connection[Any], pg_url: str) -> None:
    """Both runs find an empty database, write to it, and see different databases."""
    assert pg_conn.autocommit
    assert table_names(pg_url) == []
    assert schema_names(pg_url) == ["public"]
    # Leave something behind: the other run must not see it.
    pg_conn.execute("CREATE TABLE leftover (id int)")
    assert table_names(pg_url) == ["leftover"]
    row = pg_conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    assert row is not None
    assert row[0] not in _seen_database_oids
    _seen_database_oids.append(row[0])


def test_pg_url_points_at_the_per_test_database(pg_server: PgServer, pg_dbname: str, pg_url: str) -> None:
    """pg_url is a postgresql+psycopg URL on 127.0.0.1 naming the per-test database."""
    assert pg_url == f"postgresql+psycopg://postgres@{pg_server.host}:{pg_server.port}/{pg_dbname}"
    assert query(pg_url, "SELECT current_database(), current_user") == [(pg_dbname, "postgres")]
    # params=None: SQL goes verbatim (no % processing, several statements allowed).
    assert query(pg_url, "SELECT 1; SELECT '100%'") == [("100%",)]
    assert query(pg_url, "SELECT %s::int + 1", (41,)) == [(42,)]


def _two_revision_chain(project: Project) -> None:
    """Add revisions a1 (creates `widgets`) and b2 (creates `gadgets`, alters `widgets`)."""
    project.add_revision(
        "a1",
        None,
        "CREATE TABLE widgets (id serial PRIMARY KEY, name text NOT NULL)",
        "DROP TABLE widgets",
        slug="widgets",
    )
    project.add_revision(
        "b2",
        "a1",
        ["CREATE TABLE gadgets (id int PRIMARY KEY)", "ALTER TABLE widgets ADD COLUMN size int"],
        ["DROP TABLE gadgets", "ALTER TABLE widgets DROP COLUMN size"],
        slug="gadgets",
        extra_upgrade_code="""
            bind = op.get_bind()
            bind.execute(sa.text("INSERT INTO gadgets VALUES (1)"))
        """,
    )


def test_alembic_upgrade_applies_a_two_revision_chain(make_project: MakeProject, pg_url: str) -> None:
    """A generic project upgrades to head with plain alembic and downgrades back to base."""
    project = make_project()
    assert project.ini.is_file() and project.env_py.is_file() and project.versions.is_dir()
    assert f"sqlalchemy.url = {pg_url}" in project.ini.read_text()
    _two_revision_chain(project)
    assert sorted(p.name for p in project.versions.glob("*.py")) == ["a1_widgets.py", "b2_gadgets.py"]

    project.run_alembic("heads").check()
    assert alembic_versions(pg_url) is None

    result = project.run_alembic("upgrade", "head").check()
    assert "Running upgrade a1 -> b2" in result.stderr
    assert table_names(pg_url) == ["alembic_version", "gadgets", "widgets"]
    assert column_names(pg_url, "widgets") == ["id", "name", "size"]
    assert query(pg_url, "SELECT id FROM gadgets") == [(1,)]
    assert alembic_versions(pg_url) == ["b2"]

    project.run_alembic("downgrade", "base").check()
    assert table_names(pg_url) == ["alembic_version"]
    assert alembic_versions(pg_url) == []


def test_rewritten_revision_is_reread(project: Project, pg_url: str) -> None:
    """Replacing a revision file takes effect on the next command (no stale bytecode)."""
    project.add_revision("a1", None, "CREATE TABLE first_try (id int)", "DROP TABLE first_try")
    project.run_alembic("upgrade", "head").check()
    project.run_alembic("downgrade", "base").check()
    project.add_revision("a1", None, "CREATE TABLE second_try (id int)", "DROP TABLE second_try", slug="again")
    assert [p.name for p in project.versions.glob("*.py")] == ["a1_again.py"]
    project.run_alembic("upgrade", "head").check()
    assert table_names(pg_url) == ["alembic_version", "second_try"]
    assert not list(project.path.rglob("__pycache__"))


def test_failing_revision_reports_error(project: Project, pg_url: str) -> None:
    """A failing upgrade gives a non-zero exit and rolls back (single transaction)."""
    project.add_revision("a1", None, ["CREATE TABLE t (id int)", "SELECT no_such_function()"])
    result = project.run_alembic("upgrade", "head")
    assert result.code != 0
    assert "no_such_function" in result.stderr
    assert table_names(pg_url) == []


def test_env_and_ini_edits(project: Project, pg_url: str) -> None:
    """set_env_option / edit_env / set_ini_option change env.py and alembic.ini."""
    project.set_env_option("transaction_per_migration", True)
    project.set_env_option("version_table", "my_versions")
    text = project.env_py.read_text()
    assert text.count("transaction_per_migration=True") == 2  # offline and online configure()
    assert "version_table='my_versions'" in text
    with pytest.raises(AssertionError):
        project.edit_env("this text is not in env.py", "x")
    project.set_ini_option("custom_option", "50%")
    assert "custom_option = 50%%" in project.ini.read_text()
    project.set_ini_option("level", "DEBUG", section="fencemigrate")
    assert project.ini.read_text().rstrip().endswith("[fencemigrate]\nlevel = DEBUG")

    project.add_revision("a1", None, "CREATE TABLE t1 (id int)")
    project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)")
    project.run_alembic("upgrade", "head").check()
    assert table_names(pg_url) == ["my_versions", "t1", "t2"]
    assert alembic_versions(pg_url, table="my_versions") == ["b2"]


def test_async_template_project(make_project: MakeProject, pg_url: str) -> None:
    """The async template works with the postgresql+psycopg URL (psycopg's async mode)."""
    if importlib.util.find_spec("greenlet") is None:  # SQLAlchemy 2.1 no longer pulls it in
        pytest.fail("greenlet is missing: an async env.py needs SQLAlchemy[asyncio] installed")
    project = make_project("async")
    assert "async_engine_from_config" in project.env_py.read_text()
    _two_revision_chain(project)
    project.run_alembic("upgrade", "head").check()
    assert table_names(pg_url) == ["alembic_version", "gadgets", "widgets"]
    assert alembic_versions(pg_url) == ["b2"]


def test_offline_sql_needs_no_database(make_project: MakeProject) -> None:
    """`alembic upgrade --sql` renders SQL without connecting (the URL is unreachable)."""
    project = make_project(url="postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    project.add_revision("a1", None, "CREATE TABLE offline_t (id int)")
    result = project.run_alembic("upgrade", "head", "--sql").check()
    assert "CREATE TABLE offline_t (id int);" in result.stdout


def test_two_projects_in_one_test(make_project: MakeProject, pg_url: str) -> None:
    """make_project can be called twice; each project has its own directory."""
    first = make_project(name="one")
    second = make_project("generic", name="two")
    assert first.path != second.path
    assert first.url == second.url == pg_url


def test_console_scripts_come_from_the_test_environment() -> None:
    """Subprocesses use the alembic of the interpreter running the tests."""
    argv = script_command("alembic")
    assert Path(argv[0]).parent == Path(sys.executable).parent or argv[:2] == [sys.executable, "-m"]


def _server_pids(pair: StreamingPair) -> set[int]:
    """The postmasters of the pair and every backend and walsender they run."""
    pids = {
        int(server.pgdata.joinpath("postmaster.pid").read_text().split()[0])
        for server in (pair.primary, pair.standby)
        if server is not None
    }
    for server in (pair.primary, pair.standby):
        if server is not None:
            pids |= {int(row[0]) for row in query(server.url(), "SELECT pid FROM pg_stat_activity")}
    return pids


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a container's pid 1 may never reap the postmaster)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.serial
def test_a_held_walsender_keeps_a_commit_from_the_promoted_standby() -> None:
    """What commits while the walsender is held is not on the standby; the immediate stop does not
    wait for the postmaster's 5-second SIGKILL of the stopped walsender; promotion moves the WAL
    timeline (the first 8 hex digits of the WAL file name)."""
    with streaming_pair() as pair:
        query(pair.url(), "CREATE TABLE replicated (id int)")
        pair.hold_wal()
        query(pair.url(), "CREATE TABLE held_back (id int)")
        started = time.monotonic()
        pair.crash_primary()
        assert time.monotonic() - started < 4.0
        pair.promote()
        assert table_names(pair.url()) == ["replicated"]
        assert query(pair.url(), "SELECT pg_walfile_name(pg_current_wal_lsn())")[0][0].startswith("00000002")


def test_a_streaming_pair_leaves_nothing_behind_after_a_failure() -> None:
    """A test that fails with the walsender held still gets both servers stopped and deleted."""
    with pytest.raises(RuntimeError, match="the test failed"):
        with streaming_pair() as pair:
            pair.hold_wal()
            pids = _server_pids(pair)
            directories = [pair.primary.pgdata.parent, pair.standby.pgdata.parent]  # type: ignore[union-attr]
            raise RuntimeError("the test failed")
    assert [pid for pid in pids if _alive(pid)] == []
    assert [path for path in directories if path.exists()] == []

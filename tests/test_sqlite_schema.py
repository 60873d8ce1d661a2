"""The fence schema on SQLite: prefixed tables, idempotent install, the monotonic guard, concurrent first runs."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from support.project import script_command, sqlite_url, start_process
from support.sqlite_rows import (
    FENCE_TABLES,
    alembic_versions,
    events,
    fence_installed,
    fence_tokens,
    ledger,
    make_sqlite_project,
    query,
    snapshot,
    table_names,
)

import fencemigrate
import fencemigrate.api
from fencemigrate.dialects.prefixed import VERSION


def test_install_is_idempotent_and_the_first_run_installs_in_its_transaction(tmp_path: Path) -> None:
    """``install`` creates the prefixed tables once, and Alembic's version table (empty, guarded); a
    second install and the next run change nothing."""
    project = make_sqlite_project(tmp_path)
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    db = tmp_path / "db.sqlite"

    assert project.run_cli("install").check(0).stdout == "installed\n"
    assert table_names(db) == sorted(["alembic_version", *(f"fencemigrate_{table}" for table in FENCE_TABLES)])
    assert query(db, "SELECT version_num FROM alembic_version") == []
    assert query(db, "SELECT one_row, version FROM fencemigrate_schema_version") == [(1, VERSION)]
    installed = snapshot(db)
    assert project.run_cli("install").check(0).stdout == "already installed\n"
    assert snapshot(db) == installed

    out = project.run_cli("upgrade", "head", "--token", "3").check(0)
    assert "installed the fence schema" not in out.stdout
    assert ledger(db)["0001"][0] == 3


def test_fence_schema_option_is_the_table_prefix(tmp_path: Path) -> None:
    """``fencemigrate_schema`` names the tables' prefix, quoted as needed (here with a space and a quote)."""
    project = make_sqlite_project(tmp_path)
    project.set_ini_option("fencemigrate_schema", 'ops "fence"')
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    db = tmp_path / "db.sqlite"

    assert "  installed the fence schema" in project.run_cli("upgrade", "head", "--token", "4").check(0).stdout
    assert {f'ops "fence"_{table}' for table in FENCE_TABLES} <= set(table_names(db))
    assert not fence_installed(db)  # nothing under the default prefix
    assert query(db, 'SELECT resource, token FROM "ops ""fence""_agent_fence"') == [("db/migrations", 4)]
    assert project.run_cli("install").check(0).stdout == "already installed\n"
    assert f'"fence_schema_version": "{VERSION}"' in project.run_cli("state", "--json").check(0).stdout


GUARDED_WRITES = {
    "lower-fence-token": "UPDATE fencemigrate_agent_fence SET token = 1",
    "rename-resource": "UPDATE fencemigrate_agent_fence SET resource = 'elsewhere'",
    "delete-fence-row": "DELETE FROM fencemigrate_agent_fence",
    "replace-fence-row-lower": "INSERT OR REPLACE INTO fencemigrate_agent_fence (resource, token) VALUES ('db/migrations', 1)",
    "lower-lease-token": "UPDATE fencemigrate_lease SET token = 1",
    "rename-lease": "UPDATE fencemigrate_lease SET resource = 'elsewhere'",
    "delete-lease": "DELETE FROM fencemigrate_lease",
    "replace-lease-lower": "INSERT OR REPLACE INTO fencemigrate_lease (resource, token) VALUES ('db/migrations', 1)",
}


@pytest.mark.parametrize("sql", list(GUARDED_WRITES.values()), ids=list(GUARDED_WRITES))
def test_monotonic_guard_rejects_any_client(tmp_path: Path, sql: str) -> None:
    """Triggers refuse, from any client, to lower or rename a fence or lease token, or delete its row."""
    project = make_sqlite_project(tmp_path)
    assert project.run_cli("install").check(0).stdout == "installed\n"
    db = tmp_path / "db.sqlite"
    with closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.execute("INSERT INTO fencemigrate_agent_fence (resource, token) VALUES ('db/migrations', 5)")
        connection.execute("INSERT INTO fencemigrate_lease (resource, token) VALUES ('db/migrations', 5)")
        with pytest.raises(sqlite3.IntegrityError, match="monotonic"):
            connection.execute(sql)
        # Raising the token, the way a claim does, is allowed.
        connection.execute("UPDATE fencemigrate_agent_fence SET token = 6")
        connection.execute("UPDATE fencemigrate_lease SET token = 6")
    assert fence_tokens(db) == {"db/migrations": 6}
    assert query(db, "SELECT resource, token FROM fencemigrate_lease") == [("db/migrations", 6)]


def test_concurrent_first_runs_install_once_and_apply_once(tmp_path: Path) -> None:
    """Three fresh runs at once on one new file: SQLite lets one writer in at a time (each waits on
    the busy timeout), so all exit 0, one installs and applies, the others find nothing to do.
    The assertions hold for any interleaving; the revision's pause only makes overlap likely."""
    project = make_sqlite_project(tmp_path)
    project.add_revision(
        "0001",
        None,
        "CREATE TABLE t1 (id int)",
        "DROP TABLE t1",
        slug="t1",
        extra_upgrade_code="import time\ntime.sleep(1)",
    )
    db = tmp_path / "db.sqlite"
    argv = script_command("fencemigrate") + ["upgrade", "head", "--token", "5", "--holder", "racer"]
    runs = [start_process(argv, project.path) for _ in range(3)]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    stdouts = [stdout for stdout, _ in outputs]
    assert sum("  installed the fence schema" in out for out in stdouts) == 1, stdouts
    assert sum("  applied 0001 under token 5" in out for out in stdouts) == 1, stdouts
    assert sum("  nothing to do" in out for out in stdouts) == 2, stdouts
    assert alembic_versions(db) == ["0001"]
    assert ledger(db) == {"0001": (5, "racer", "upgrade")}
    assert events(db) == [("APPLY", "racer", 5, "0001")]


def test_install_sql_prints_the_sqlite_script(tmp_path: Path) -> None:
    """On a SQLite project ``install --sql`` prints the SQLite script and touches nothing; run by
    hand (as the sqlite3 shell would) it installs exactly what a run installs, and runs use it."""
    project = make_sqlite_project(tmp_path)
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    script = project.run_cli("install", "--sql").check(0).stdout
    assert script.startswith("BEGIN IMMEDIATE;\n") and script.endswith("COMMIT;\n")
    assert 'CREATE TABLE IF NOT EXISTS "fencemigrate_agent_fence" (' in script
    assert not (tmp_path / "db.sqlite").exists()

    with closing(sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)) as connection:
        connection.executescript(script)
    by_runner = make_sqlite_project(tmp_path, "by_runner", "by_runner.sqlite")
    assert by_runner.run_cli("install").check(0).stdout.strip() == "installed"
    assert schema_of(tmp_path / "db.sqlite") == schema_of(tmp_path / "by_runner.sqlite")
    assert project.run_cli("install").check(0).stdout.strip() == "already installed"
    project.run_cli("upgrade", "head", "--token", "4", "--holder", "h").check(0)
    assert ledger(tmp_path / "db.sqlite") == {"0001": (4, "h", "upgrade")}


def schema_of(database: Path) -> list[tuple[Any, ...]]:
    """The fence tables, indexes and triggers of a file, as SQLite stores their definitions."""
    return query(
        database,
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'fencemigrate%' ORDER BY type, name",
    )


def test_a_database_at_an_unknown_version_is_refused(tmp_path: Path) -> None:
    """A fence schema at a version this fencemigrate has no update path from stops the run, unchanged."""
    project = make_sqlite_project(tmp_path)
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    db = tmp_path / "db.sqlite"
    assert project.run_cli("install").check(0).stdout == "installed\n"
    with closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.execute("UPDATE fencemigrate_schema_version SET version = '9.9'")
    before = snapshot(db)
    result = project.run_cli("upgrade", "head", "--token", "4").check(1)
    assert result.stderr.splitlines()[-1] == (
        "fencemigrate: error: fence schema fencemigrate is at version 9.9, but this "
        f"fencemigrate needs {VERSION} and has no upgrade path from it on this database"
    )
    assert snapshot(db) == before


def test_other_sqlite_connections_are_left_alone_after_a_run(tmp_path: Path) -> None:
    """After an in-process fenced run, a new pysqlite connection behaves as pysqlite always does
    (its DDL commits on its own): the recipe's listeners went with the run."""
    project = make_sqlite_project(tmp_path)
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    outcome = fencemigrate.api.upgrade(fencemigrate.load_config([str(project.ini)]), "head", token=5, holder="api")
    assert [step.revisions for step in outcome.steps] == [("0001",)]
    assert ledger(tmp_path / "db.sqlite") == {"0001": (5, "api", "upgrade")}

    other = tmp_path / "other.sqlite"
    with create_engine(sqlite_url(other)).connect() as connection:
        connection.exec_driver_sql("CREATE TABLE t (id int)")
        connection.rollback()
    assert table_names(other) == ["t"]

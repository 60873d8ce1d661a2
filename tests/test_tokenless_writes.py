"""Writes without a token: once a database is fenced, plain ``alembic`` cannot write its version table.

The database itself refuses a version-table write from a transaction that never claimed the fence
(a trigger on the version table), and PostgreSQL rolls the revision's DDL back with it. Controls:
the same plain ``alembic`` commands succeed on an unfenced database and on one that opted out with
``fencemigrate install --allow-tokenless-writes``. ``state`` and ``check --db`` reconcile the
version table with the ledger.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from support.backend_rows import plain_sql, table
from support.db import alembic_versions, table_names
from support.incident_story import fm
from support.mysql_rows import app_tables
from support.mysql_rows import ledger as mysql_ledger
from support.mysql_rows import versions as mysql_versions
from support.project import MakeProject, Project, Result
from support.sqlite_rows import alembic_versions as sqlite_versions
from support.sqlite_rows import ledger as sqlite_ledger
from support.sqlite_rows import make_sqlite_project
from support.sqlite_rows import table_names as sqlite_tables

REFUSED = "fencemigrate refused this"
HOW_TO = "Migrate this database with fencemigrate"
OPT_OUT = "fencemigrate install --allow-tokenless-writes"


def three_revisions(project: Project) -> Project:
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1")
    project.add_revision("0002", "0001", "CREATE TABLE t2 (id int)", "DROP TABLE t2")
    project.add_revision("0003", "0002", "CREATE TABLE t3 (id int)", "DROP TABLE t3")
    return project


def assert_refused(result: Result) -> None:
    assert result.code != 0, str(result)
    assert REFUSED in result.stderr and HOW_TO in result.stderr and OPT_OUT in result.stderr, str(result)


def state_json(project: Project) -> dict[str, object]:
    result = project.run_cli("state", "--json").check()
    payload: dict[str, object] = json.loads(result.stdout)
    return payload


# -- PostgreSQL ------------------------------------------------------------------------------------


def test_plain_alembic_is_refused_on_a_fenced_postgresql_database(project: Project) -> None:
    three_revisions(project)
    fm(project, "upgrade", "0002", token=5, holder="agent").check()
    assert alembic_versions(project.url) == ["0002"]

    assert_refused(project.run_alembic("upgrade", "head"))
    assert table_names(project.url) == ["alembic_version", "t1", "t2"]  # 0003's DDL rolled back
    assert alembic_versions(project.url) == ["0002"]

    assert_refused(project.run_alembic("downgrade", "-1"))
    assert table_names(project.url) == ["alembic_version", "t1", "t2"]  # DROP TABLE t2 rolled back
    assert alembic_versions(project.url) == ["0002"]

    assert_refused(project.run_alembic("stamp", "0003"))
    assert alembic_versions(project.url) == ["0002"]

    # fencemigrate's own writes still go through.
    fm(project, "upgrade", "head", token=5, holder="agent").check()
    fm(project, "downgrade", "0001", token=6, holder="agent").check()
    fm(project, "stamp", "0002", token=6, holder="agent").check()
    assert alembic_versions(project.url) == ["0002"]
    assert state_json(project)["tokenless_writes"] == {"status": "refused", "allowed_at": None}


def test_plain_alembic_on_an_unfenced_postgresql_database_is_not_refused(project: Project) -> None:
    three_revisions(project)
    project.run_alembic("upgrade", "head").check()
    project.run_alembic("downgrade", "-1").check()
    assert alembic_versions(project.url) == ["0002"]


def test_opting_out_lets_plain_alembic_write_and_state_reconciles(project: Project) -> None:
    three_revisions(project)
    fm(project, "upgrade", "0001", token=5, holder="agent").check()
    result = project.run_cli("install", "--allow-tokenless-writes").check()
    assert result.stdout == (
        "already installed; writes to the version table without a fencing token are allowed (opted out)\n"
    )
    project.run_alembic("upgrade", "0002").check()
    # A fenced run after the opt-out does not put the guard back.
    fm(project, "upgrade", "head", token=5, holder="agent").check()
    project.run_alembic("downgrade", "-1").check()
    assert alembic_versions(project.url) == ["0002"]

    payload = state_json(project)
    tokenless = payload["tokenless_writes"]
    assert isinstance(tokenless, dict) and tokenless["status"] == "allowed" and tokenless["allowed_at"]
    assert payload["unrecorded"] == {"version_table_only": ["0002"], "ledger_only": ["0003"]}
    text = project.run_cli("state").check().stdout
    assert "tokenless writes to alembic_version: allowed (opted out at " in text
    assert (
        "NOT IN LEDGER: 0002 is applied by alembic_version but has no ledger row (written without a fencing token)"
    ) in text
    assert (
        "NOT IN VERSION TABLE: 0003 has a ledger row but alembic_version does not have it applied "
        "(changed without a fencing token)"
    ) in text

    check = project.run_cli("check", "--db", "--select", "FM407")
    assert check.code == 1, str(check)
    assert "FM407" in check.stdout and "0002" in check.stdout and "0003" in check.stdout

    # Opting back in guards the table again.
    project.run_cli("install", "--forbid-tokenless-writes").check()
    assert_refused(project.run_alembic("downgrade", "-1"))
    assert state_json(project)["tokenless_writes"] == {"status": "refused", "allowed_at": None}


def test_check_db_finds_nothing_unrecorded_after_fenced_runs(project: Project) -> None:
    """Near miss for FM407: a version table and ledger that agree (a downgrade and a stamp included)."""
    three_revisions(project)
    fm(project, "upgrade", "head", token=5, holder="agent").check()
    fm(project, "downgrade", "0002", token=5, holder="agent").check()
    fm(project, "stamp", "0003", token=5, holder="agent").check()
    check = project.run_cli("check", "--db", "--select", "FM407")
    assert check.code == 0, str(check)
    assert state_json(project)["unrecorded"] == {"version_table_only": [], "ledger_only": []}


def test_offline_script_guards_the_version_table(project: Project) -> None:
    """The --sql script carries the guard: it creates the trigger after Alembic's version table."""
    three_revisions(project)
    script = project.run_cli("upgrade", "head", "--sql", "--token", "5", "--holder", "agent").check().stdout
    assert "guard_version_table('alembic_version', to_regclass('alembic_version'))" in script


# -- SQLite ----------------------------------------------------------------------------------------


def test_plain_alembic_is_refused_on_a_fenced_sqlite_database(tmp_path: Path) -> None:
    """The version table is guarded as on PostgreSQL; but plain alembic's DDL is not transactional on
    SQLite (pysqlite commits each DDL statement on its own), so only the version write is refused."""
    project = three_revisions(make_sqlite_project(tmp_path))
    database = tmp_path / "db.sqlite"
    fm(project, "upgrade", "0002", token=5, holder="agent").check()

    assert_refused(project.run_alembic("upgrade", "head"))
    assert sqlite_versions(database) == ["0002"]
    assert "t3" in sqlite_tables(database)  # committed by pysqlite before the version write
    assert_refused(project.run_alembic("stamp", "0003"))
    assert sqlite_versions(database) == ["0002"]

    # fencemigrate's own writes still go through.
    fm(project, "stamp", "0003", token=5, holder="agent").check()
    assert sqlite_versions(database) == ["0003"]
    assert_refused(project.run_alembic("downgrade", "-1"))
    assert sqlite_versions(database) == ["0003"]
    fm(project, "stamp", "0002", token=6, holder="agent").check()  # t3 was dropped by the refused run
    fm(project, "upgrade", "head", token=6, holder="agent").check()
    fm(project, "downgrade", "0001", token=6, holder="agent").check()
    assert sqlite_versions(database) == ["0001"]
    assert set(sqlite_ledger(database)) == {"0001"}
    assert sqlite_tables(database) == sorted(
        [name for name in sqlite_tables(database) if name.startswith("fencemigrate_")] + ["alembic_version", "t1"]
    )
    assert state_json(project)["tokenless_writes"] == {"status": "refused", "allowed_at": None}


def test_opting_out_on_sqlite_lets_plain_alembic_write(tmp_path: Path) -> None:
    project = three_revisions(make_sqlite_project(tmp_path))
    database = tmp_path / "db.sqlite"
    fm(project, "upgrade", "0001", token=5, holder="agent").check()
    project.run_cli("install", "--allow-tokenless-writes").check()
    fm(project, "upgrade", "0002", token=5, holder="agent").check()
    project.run_alembic("upgrade", "head").check()
    assert sqlite_versions(database) == ["0003"]
    assert "t3" in sqlite_tables(database)
    payload = state_json(project)
    assert payload["unrecorded"] == {"version_table_only": ["0003"], "ledger_only": []}
    project.run_cli("install", "--forbid-tokenless-writes").check()
    assert_refused(project.run_alembic("stamp", "0002"))
    assert sqlite_versions(database) == ["0003"]


# -- MariaDB ---------------------------------------------------------------------------------------


def test_plain_alembic_on_fenced_mariadb_is_refused_and_leaves_the_revision_dirty(
    make_project: MakeProject, mysql_url: str
) -> None:
    """MySQL has committed the revision's DDL when the version write is refused: the revision is
    dirty (state shows it, fenced writes exit 5) until `resolve` settles it."""
    project = three_revisions(make_project(url=mysql_url))
    fm(project, "upgrade", "0002", token=5, holder="agent").check()

    assert_mysql_refused(project.run_alembic("upgrade", "head"))
    assert mysql_versions(mysql_url) == ["0002"]
    assert "t3" in app_tables(mysql_url)  # MySQL committed the DDL before the version write
    dirty = state_json(project)["dirty"]
    assert isinstance(dirty, list) and [(row["revision"], row["state"], row["token"]) for row in dirty] == [
        ("0003", "applying", 0)
    ]
    assert "DIRTY: 0003 (alembic_version): a plain alembic upgrade (no fencing token) was refused at " in (
        project.run_cli("state").check().stdout
    )
    fm(project, "upgrade", "head", token=6, holder="agent").check(5)

    fm(project, "resolve", "0003", "--as", "applied", token=6, holder="agent").check()
    assert mysql_versions(mysql_url) == ["0003"]
    assert set(mysql_ledger(mysql_url)) == {"0001", "0002", "0003"}
    assert state_json(project)["dirty"] == []

    assert_mysql_refused(project.run_alembic("downgrade", "-1"))
    assert mysql_versions(mysql_url) == ["0003"]
    assert "t3" not in app_tables(mysql_url)
    dirty = state_json(project)["dirty"]
    assert isinstance(dirty, list) and [(row["revision"], row["state"]) for row in dirty] == [("0003", "rolling_back")]
    fm(project, "resolve", "0003", "--as", "rolled-back", token=6, holder="agent").check()
    assert mysql_versions(mysql_url) == ["0002"]
    assert set(mysql_ledger(mysql_url)) == {"0001", "0002"}

    assert_mysql_refused(project.run_alembic("stamp", "0001"))
    assert mysql_versions(mysql_url) == ["0002"]
    fm(project, "resolve", "0002", "--as", "applied", token=6, holder="agent").check()

    # fencemigrate's own writes still go through.
    fm(project, "upgrade", "head", token=6, holder="agent").check()
    fm(project, "downgrade", "0001", token=6, holder="agent").check()
    fm(project, "stamp", "0002", token=6, holder="agent").check()
    assert mysql_versions(mysql_url) == ["0002"]
    assert state_json(project)["tokenless_writes"] == {"status": "refused", "allowed_at": None}


def test_opting_out_on_mariadb_lets_plain_alembic_write(make_project: MakeProject, mysql_url: str) -> None:
    project = three_revisions(make_project(url=mysql_url))
    fm(project, "upgrade", "0001", token=5, holder="agent").check()
    project.run_cli("install", "--allow-tokenless-writes").check()
    fm(project, "upgrade", "0002", token=5, holder="agent").check()
    project.run_alembic("upgrade", "head").check()
    assert mysql_versions(mysql_url) == ["0003"]
    payload = state_json(project)
    assert payload["dirty"] == [] and payload["unrecorded"] == {"version_table_only": ["0003"], "ledger_only": []}
    project.run_cli("install", "--forbid-tokenless-writes").check()
    assert_mysql_refused(project.run_alembic("stamp", "0002"))


def assert_mysql_refused(result: Result) -> None:
    assert result.code != 0, str(result)
    assert "fencemigrate refused a version-table write without a fencing token" in result.stderr, str(result)


# -- The first write: the version table does not exist yet -----------------------------------------
# A database is fenced from its install or its first grant on; the version table may not exist
# then. fencemigrate creates it (empty, as Alembic's first run would) and guards it, so plain
# alembic's first write is refused too. Controls: the same first write on an unfenced database
# (test_plain_alembic_on_an_unfenced_postgresql_database_is_not_refused) and after an opt-out.


def test_plain_alembics_first_write_after_install_is_refused_on_postgresql(project: Project) -> None:
    three_revisions(project)
    project.run_cli("install").check()
    assert alembic_versions(project.url) == []
    assert_refused(project.run_alembic("upgrade", "head"))
    assert table_names(project.url) == ["alembic_version"]  # t1..t3 rolled back with the version write
    assert state_json(project)["tokenless_writes"] == {"status": "refused", "allowed_at": None}
    fm(project, "upgrade", "head", token=5, holder="agent").check()
    assert alembic_versions(project.url) == ["0003"]


def test_plain_alembics_first_write_after_a_grant_is_refused_on_postgresql(project: Project) -> None:
    three_revisions(project)
    granted = project.run_cli("lease", "acquire", "--holder", "agent-a", "--json").check()
    assert json.loads(granted.stdout)["state"]["tokenless_writes"] == {"status": "refused", "allowed_at": None}
    assert_refused(project.run_alembic("upgrade", "head"))
    assert table_names(project.url) == ["alembic_version"]


def test_opting_out_before_the_first_write_lets_plain_alembic_create_its_table(project: Project) -> None:
    three_revisions(project)
    project.run_cli("install", "--allow-tokenless-writes").check()
    assert table_names(project.url) == []  # nothing created for a table that takes tokenless writes
    project.run_alembic("upgrade", "head").check()
    assert alembic_versions(project.url) == ["0003"]


def test_plain_alembics_first_write_after_install_is_refused_on_sqlite(tmp_path: Path) -> None:
    project = three_revisions(make_sqlite_project(tmp_path))
    database = tmp_path / "db.sqlite"
    project.run_cli("install").check()
    assert sqlite_versions(database) == []
    assert_refused(project.run_alembic("upgrade", "head"))
    assert sqlite_versions(database) == []
    project.run_cli("install", "--allow-tokenless-writes").check()  # control: the same write, opted out
    project.run_alembic("stamp", "head").check()
    assert sqlite_versions(database) == ["0003"]


def test_plain_alembics_first_write_after_a_grant_is_refused_on_mariadb(
    make_project: MakeProject, mysql_url: str
) -> None:
    project = three_revisions(make_project(url=mysql_url))
    project.run_cli("lease", "acquire", "--holder", "agent-a").check()
    assert mysql_versions(mysql_url) == []
    assert_mysql_refused(project.run_alembic("upgrade", "0001"))
    assert mysql_versions(mysql_url) == []
    project.run_cli("install", "--allow-tokenless-writes").check()  # control: the same write, opted out
    project.run_alembic("stamp", "0001").check()
    assert mysql_versions(mysql_url) == ["0001"]


# -- A failed first fenced run (issue 24, 8(f)) ----------------------------------------------------
# The guard on the version table is committed before the first revision runs: when that revision
# fails and its transaction rolls back, the database stays fenced and plain alembic stays out.
# Control: the same failing first revision run by plain alembic leaves nothing that refuses it.


def failing_first_revision(project: Project) -> Project:
    project.add_revision("0001", None, ["CREATE TABLE t1 (id int)", "SELECT 1/0"], "DROP TABLE t1")
    project.add_revision("0002", "0001", "CREATE TABLE t2 (id int)", "DROP TABLE t2")
    return project


def test_a_failed_first_run_with_a_token_leaves_the_version_table_guarded(project: Project) -> None:
    failing_first_revision(project)
    failed = fm(project, "upgrade", "head", token=5, holder="agent")
    assert failed.code == 1 and "division by zero" in failed.stderr, str(failed)
    assert table_names(project.url) == ["alembic_version"]  # t1 rolled back; the guarded table stays
    assert_refused(project.run_alembic("stamp", "head"))
    assert alembic_versions(project.url) == []
    assert state_json(project)["tokenless_writes"] == {"status": "refused", "allowed_at": None}


def test_a_failed_first_run_with_its_own_lease_leaves_the_version_table_guarded(project: Project) -> None:
    failing_first_revision(project)
    failed = project.run_cli("upgrade", "head", "--holder", "agent")
    assert failed.code == 1 and "division by zero" in failed.stderr, str(failed)
    assert_refused(project.run_alembic("stamp", "head"))
    assert alembic_versions(project.url) == []


def test_a_failed_first_plain_alembic_run_leaves_nothing_that_refuses_the_next(project: Project) -> None:
    failing_first_revision(project)
    assert project.run_alembic("upgrade", "head").code != 0
    project.run_alembic("stamp", "head").check()  # control: nothing fenced, so nothing refuses it
    assert alembic_versions(project.url) == ["0002"]


def test_a_failed_first_run_in_precheck_mode_leaves_the_version_table_guarded(project: Project) -> None:
    failing_first_revision(project)
    failed = fm(project, "upgrade", "head", "--mode", "precheck", token=5, holder="agent")
    assert failed.code != 0 and "division by zero" in failed.stderr, str(failed)
    assert_refused(project.run_alembic("stamp", "head"))
    assert alembic_versions(project.url) == []


# -- A renamed version table keeps its guards' names -------------------------------------------------
# SQLite and MySQL name triggers per database: a version table renamed (or copied with its triggers)
# keeps the names the new version table's guards need, and CREATE TRIGGER IF NOT EXISTS would do
# nothing. Runs refuse, naming the table that holds them, until they are dropped.

NAMES_TAKEN = (
    "fencemigrate: error: cannot guard the version table alembic_version: table av_old has a trigger named "
    "as one of its guards (alembic_version_no_tokenless_insert, alembic_version_no_tokenless_update, "
    "alembic_version_no_tokenless_delete)"
)
OLD_GUARDS = [f"alembic_version_no_tokenless_{op}" for op in ("insert", "update", "delete")]


RENAMES = {
    "sqlite": "ALTER TABLE alembic_version RENAME TO av_old",
    "mysql": "RENAME TABLE alembic_version TO av_old",
}


def plain_rows(url: str, sql: str | None) -> list[str]:
    """The first column of ``sql``'s rows (None: the names of the tables)."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            if sql is None:
                return sa.inspect(connection).get_table_names()
            return [str(value) for value in connection.execute(sa.text(sql)).scalars()]
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "mysql"], indirect=True)
def test_a_renamed_version_table_leaves_a_new_one_unguarded_and_runs_refuse(
    backend: str, backend_url: str, make_project: MakeProject
) -> None:
    project = three_revisions(make_project(url=backend_url))

    def versions() -> list[str]:
        return plain_rows(backend_url, "SELECT version_num FROM alembic_version")

    fm(project, "upgrade", "0001", token=5, holder="agent").check()
    for sql in (
        RENAMES[backend],
        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
        "INSERT INTO alembic_version SELECT version_num FROM av_old",
    ):
        plain_sql(backend, backend_url, sql)
    assert state_json(project)["tokenless_writes"] == {"status": "unguarded", "allowed_at": None}

    refused = fm(project, "upgrade", "0002", token=5, holder="agent").check(1)
    assert refused.stderr.splitlines()[-1].startswith(NAMES_TAKEN), str(refused)
    assert versions() == ["0001"] and "t2" not in plain_rows(backend_url, None)
    assert plain_rows(backend_url, f"SELECT revision FROM {table(backend, 'applied_revision')}") == ["0001"]
    # Control: nothing guards the new version table, so plain alembic writes through.
    project.run_alembic("upgrade", "0002").check()
    assert versions() == ["0002"]

    for name in OLD_GUARDS:
        plain_sql(backend, backend_url, f"DROP TRIGGER {name}")
    fm(project, "upgrade", "head", token=5, holder="agent").check()
    assert state_json(project)["tokenless_writes"] == {"status": "refused", "allowed_at": None}
    downgrade = project.run_alembic("downgrade", "-1")
    (assert_refused if backend == "sqlite" else assert_mysql_refused)(downgrade)
    assert versions() == ["0003"]

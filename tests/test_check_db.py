"""``fencemigrate check --db`` on real databases: revisions applied with fencemigrate, then the
directory or the fence schema changed behind its back, then checked.

The database is read through the project's own env.py (a real ``alembic init`` project), and
checking it changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pymysql
import pytest
from support.db import alembic_versions, execute, query
from support.mysql_rows import fence_tokens, ledger
from support.mysql_rows import snapshot as mysql_snapshot
from support.mysql_server import mysql_rows
from support.project import MakeProject, Project, Result
from support.sqlite_rows import make_sqlite_project, snapshot

from fencemigrate.dialects import dialect_for
from fencemigrate.dialects.postgresql import default_version

NO_MODELS = "; model comparison: env.py has no target_metadata"  # the generic env.py: FM408 says so
NOT_COMPARED = "; --no-db: neither the database nor the models compared (FM408, what alembic check does)"
DRIFT_FIX = (
    "restore the file as it was applied (`fencemigrate show {revision} --applied > {path}`), "
    "and make the change in a new revision"
)
PG_VERSION = default_version()  # the version a fenced run installs on PostgreSQL
SQLITE_VERSION = dialect_for("sqlite").schema_version()
ALTERED_FIX = (
    "find out who changed it (stale writers may get through), then recreate it as fencemigrate's "
    "install script has it (`fencemigrate install --sql`; sql/sqlite/ on SQLite, sql/mysql/ on MySQL)"
)


def add_revisions(project: Project, count: int) -> list[Path]:
    """Revisions 0001..000<count>, each creating table t<n>."""
    return [
        project.add_revision(
            f"{n:04d}",
            None if n == 1 else f"{n - 1:04d}",
            f"CREATE TABLE t{n} (id int)",
            f"DROP TABLE t{n}",
            slug=f"t{n}",
        )
        for n in range(1, count + 1)
    ]


def apply(project: Project) -> None:
    """``fencemigrate upgrade head`` under token 34 as agent-A."""
    project.run_cli("upgrade", "head", "--token", "34", "--holder", "agent-A").check(0)


def check_db(project: Project, *args: str, code: int) -> dict[str, Any]:
    """``check --db --json ARGS``: the exit status and the JSON object printed."""
    result = project.run_cli("check", "--db", "--json", *args).check(code)
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


def findings(payload: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """``(rule, file:line or None, message)`` of each finding."""
    return [
        (item["rule"], None if item["file"] is None else f"{item['file']}:{item['line']}", item["message"])
        for item in payload["findings"]
    ]


def ledger_row(project: Project, revision: str) -> dict[str, Any]:
    """The ledger row of ``revision`` as ``fencemigrate state --json`` shows it."""
    state = json.loads(project.run_cli("state", "--json").check(0).stdout)
    rows = [row for row in state["ledger"] if row["revision"] == revision]
    assert len(rows) == 1, state
    row = rows[0]
    assert isinstance(row, dict)
    return row


def pg_snapshot(url: str) -> dict[str, Any]:
    """Versions, fence rows, ledger and the event count: what a read-only check must leave alone."""
    return {
        "versions": alembic_versions(url),
        "fence": query(url, "SELECT resource, token, updated_at FROM fencemigrate.agent_fence ORDER BY 1"),
        "ledger": query(url, "SELECT * FROM fencemigrate.applied_revision ORDER BY revision"),
        "events": query(url, "SELECT count(*) FROM fencemigrate.fence_event"),
    }


def test_a_database_at_head_passes(project: Project) -> None:
    add_revisions(project, 2)
    apply(project)
    result = project.run_cli("check", "--db").check(0)
    assert result.stdout == f"no problems found in 2 revision files, database checked{NO_MODELS}\n"


def test_a_revision_edited_after_it_was_applied_is_checksum_drift(project: Project) -> None:
    first, _ = add_revisions(project, 2)
    apply(project)
    applied = hashlib.sha256(first.read_bytes()).hexdigest()
    row = ledger_row(project, "0001")
    assert row["script_sha256"] == applied
    before = pg_snapshot(project.url)

    first.write_text(first.read_text().replace("CREATE TABLE t1 (id int)", "CREATE TABLE t1 (id bigint)"))
    edited = hashlib.sha256(first.read_bytes()).hexdigest()
    payload = check_db(project, code=1)

    path = "migrations/versions/0001_t1.py"
    message = (
        f"0001 changed after it was applied: its sha256 is now {edited[:12]}, the ledger has {applied[:12]} "
        f"(applied under token 34 by agent-A at {row['applied_at']})"
    )
    assert findings(payload) == [("FM402", f"{path}:9", message)]
    assert payload["findings"][0]["fix"] == DRIFT_FIX.format(revision="0001", path=path)
    diff = payload["findings"][0]["diff"].splitlines()
    assert diff[:2] == [f"--- applied/{path}", f"+++ on disk/{path}"]
    assert [line for line in diff[2:] if line.startswith(("+", "-"))] == [
        "-    op.execute('CREATE TABLE t1 (id int)')",
        "+    op.execute('CREATE TABLE t1 (id bigint)')",
    ]
    assert (payload["status"], payload["database_checked"]) == ("failed", True)
    assert pg_snapshot(project.url) == before
    # With --no-db only the files are read: the drift cannot be seen.
    assert (
        project.run_cli("check", "--no-db").check(0).stdout == f"no problems found in 2 revision files{NOT_COMPARED}\n"
    )


def test_a_revision_not_applied_yet_is_pending(project: Project) -> None:
    add_revisions(project, 2)
    apply(project)
    add_revisions(project, 3)
    payload = check_db(project, code=1)
    assert findings(payload) == [
        ("FM401", "migrations/versions/0003_t3.py:9", "0003 is not applied to the database (database at 0002)"),
    ]
    result = project.run_cli("check", "--db", "--ignore", "pending-revision").check(0)
    assert result.stdout == f"no problems found in 3 revision files, database checked{NO_MODELS}\n"


def test_an_applied_revision_whose_file_is_gone_is_reported(project: Project) -> None:
    add_revisions(project, 2)
    apply(project)
    project.remove_revision("0002")
    payload = check_db(project, code=1)
    assert findings(payload) == [
        (
            "FM403",
            None,
            "0002 is applied in the database, but no revision file in migrations/versions has it "
            "(the ledger has it under token 34 by agent-A)",
        ),
    ]
    assert payload["findings"][0]["revision"] == "0002"


def test_a_database_without_the_fence_schema_is_reported(project: Project) -> None:
    add_revisions(project, 1)
    project.run_alembic("upgrade", "head").check(0)
    payload = check_db(project, code=1)
    assert findings(payload) == [
        ("FM404", None, "the fence schema fencemigrate is not installed: no fenced run has written to this database"),
    ]


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("DROP TRIGGER agent_fence_monotonic ON fencemigrate.agent_fence", "trigger agent_fence_monotonic is missing"),
        (
            "ALTER TABLE fencemigrate.agent_fence DISABLE TRIGGER agent_fence_no_truncate",
            "trigger agent_fence_no_truncate is disabled",
        ),
        (
            "DROP TRIGGER agent_fence_monotonic ON fencemigrate.agent_fence; "
            "CREATE TRIGGER agent_fence_monotonic BEFORE DELETE ON fencemigrate.agent_fence "
            "FOR EACH ROW EXECUTE FUNCTION fencemigrate.agent_fence_guard()",
            "trigger agent_fence_monotonic was changed: it is now `CREATE TRIGGER agent_fence_monotonic BEFORE "
            "DELETE ON fencemigrate.agent_fence FOR EACH ROW EXECUTE FUNCTION fencemigrate.agent_fence_guard()`",
        ),
        (
            "CREATE OR REPLACE FUNCTION fencemigrate.agent_fence_guard() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RETURN NEW; END $$",
            "function agent_fence_guard() was replaced: its body is not fencemigrate's",
        ),
        ("DROP TABLE fencemigrate.lease CASCADE", "table lease is missing"),  # agent_fence.leased refers to it
    ],
)
def test_an_altered_fence_schema_is_reported(project: Project, sql: str, problem: str) -> None:
    add_revisions(project, 1)
    apply(project)
    execute(project.url, sql)
    payload = check_db(project, code=1)
    message = f"the fence schema fencemigrate ({PG_VERSION}) differs from fencemigrate's: {problem}"
    found = findings(payload)
    assert found[0] == ("FM405", None, message)
    assert {rule for rule, _, _ in found} == {"FM405"}
    assert payload["findings"][0]["fix"] == ALTERED_FIX


def test_a_dropped_guard_really_lets_the_fence_go_down(project: Project) -> None:
    """Control for the finding above: without the trigger, any client can lower the fence."""
    add_revisions(project, 1)
    apply(project)
    execute(project.url, "DROP TRIGGER agent_fence_monotonic ON fencemigrate.agent_fence")
    execute(project.url, "UPDATE fencemigrate.agent_fence SET token = 1")
    assert query(project.url, "SELECT token FROM fencemigrate.agent_fence") == [(1,)]
    result = project.run_cli("check", "--db", "--format", "github").check(1)
    assert result.stdout.splitlines() == [
        f"::error title=FM405 fence-schema-altered::the fence schema fencemigrate ({PG_VERSION}) differs from "
        f"fencemigrate's: trigger agent_fence_monotonic is missing%0Afix: {ALTERED_FIX}",
        # What the lowered fence left (FM411), reported too:
        "::error title=FM411 ledger-above-fence::the ledger row of 0001 (alembic_version) has applied_token 34, "
        "above the fence token 1 of db/migrations: the fence was lowered after it was written%0Afix: "
        "find out who lowered the fence (a guard trigger disabled or dropped: FM405, `fencemigrate install` "
        "puts it back), then check what the stale tokens wrote; own the fence by another role (README, Two roles)",
        f"2 errors, 0 warnings in 1 revision file, database checked{NO_MODELS}",
    ]


def test_a_dirty_revision_is_reported_on_postgresql(project: Project) -> None:
    """``--mode precheck`` marks a revision dirty on PostgreSQL too when it fails after committing early."""
    project.add_revision("0001", None, ["CREATE TABLE one (id int)"], ["DROP TABLE one"], slug="one")
    project.add_revision(
        "0002",
        "0001",
        slug="early",
        extra_upgrade_code="""\
with op.get_context().autocommit_block():
    op.execute("CREATE TABLE committed_early (id int)")
op.execute("SELECT * FROM missing_table")
""",
    )
    project.run_cli("upgrade", "head", "--token", "5", "--mode", "precheck", "--holder", "agent-A").check(1)
    since = json.loads(project.run_cli("state", "--json").check(0).stdout)["dirty"][0]["since"]
    payload = check_db(project, "--select", "dirty-revision", code=1)  # the autocommit_block() is FM201's
    assert findings(payload) == [
        (
            "FM406",
            "migrations/versions/0002_early.py:9",
            f"0002 is dirty: its upgrade was started under token 5 by agent-A at {since} and never finished "
            "(alembic_version); fenced writes are refused until it is resolved",
        ),
    ]


def test_an_unreachable_database_is_an_error(project: Project) -> None:
    add_revisions(project, 1)
    project.set_url("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    result = project.run_cli("check", "--db").check(1)
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1].startswith("fencemigrate: error: database error: connection failed")


def test_sqlite_drift_and_a_dropped_guard(tmp_path: Path) -> None:
    project = make_sqlite_project(tmp_path)
    database = tmp_path / "db.sqlite"
    first, _ = add_revisions(project, 2)
    apply(project)
    assert project.run_cli("check", "--db").check(0).stdout == (
        f"no problems found in 2 revision files, database checked{NO_MODELS}\n"
    )
    applied = hashlib.sha256(first.read_bytes()).hexdigest()
    row = ledger_row(project, "0001")
    first.write_text(first.read_text() + "# reviewed\n")
    edited = hashlib.sha256(first.read_bytes()).hexdigest()
    with closing(sqlite3.connect(database, isolation_level=None)) as connection:
        connection.execute("DROP TRIGGER fencemigrate_agent_fence_no_lowering")
    before = snapshot(database)

    payload = check_db(project, code=1)
    assert findings(payload) == [
        (
            "FM402",
            "migrations/versions/0001_t1.py:9",
            f"0001 changed after it was applied: its sha256 is now {edited[:12]}, the ledger has {applied[:12]} "
            f"(applied under token 34 by agent-A at {row['applied_at']})",
        ),
        (
            "FM405",
            None,
            f"the fence schema fencemigrate ({SQLITE_VERSION}) differs from fencemigrate's: "
            "trigger fencemigrate_agent_fence_no_lowering is missing",
        ),
    ]
    assert snapshot(database) == before


def test_check_with_no_db_needs_no_database(project: Project) -> None:
    add_revisions(project, 1)
    project.set_url("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    result: Result = project.run_cli("check", "--no-db").check(0)
    assert result.stdout == f"no problems found in 1 revision file{NOT_COMPARED}\n"


# -- MySQL and MariaDB: prefixed fence tables, guard triggers, dirty revisions ------------------

MYSQL_ALTERED = (
    f"the fence schema fencemigrate ({dialect_for('mysql').schema_version()}) differs from fencemigrate's: {{problem}}"
)


@pytest.mark.parametrize("url_fixture", ["mysql_url", "mariadb_url"])
def test_mysql_a_database_at_head_passes(
    make_project: MakeProject, url_fixture: str, request: pytest.FixtureRequest
) -> None:
    project = make_project(url=request.getfixturevalue(url_fixture))
    add_revisions(project, 2)
    apply(project)
    result = project.run_cli("check", "--db").check(0)
    assert result.stdout == f"no problems found in 2 revision files, database checked{NO_MODELS}\n"


def test_mysql_drift_pending_and_missing_revisions(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    first, _ = add_revisions(project, 2)
    apply(project)
    applied = hashlib.sha256(first.read_bytes()).hexdigest()
    row = ledger_row(project, "0001")
    assert row["script_sha256"] == applied
    before = mysql_snapshot(mysql_url)

    first.write_text(first.read_text().replace("CREATE TABLE t1 (id int)", "CREATE TABLE t1 (id bigint)"))
    edited = hashlib.sha256(first.read_bytes()).hexdigest()
    payload = check_db(project, code=1)
    path = "migrations/versions/0001_t1.py"
    assert findings(payload) == [
        (
            "FM402",
            f"{path}:9",
            f"0001 changed after it was applied: its sha256 is now {edited[:12]}, the ledger has {applied[:12]} "
            f"(applied under token 34 by agent-A at {row['applied_at']})",
        ),
    ]
    assert payload["findings"][0]["fix"] == DRIFT_FIX.format(revision="0001", path=path)
    assert "+    op.execute('CREATE TABLE t1 (id bigint)')" in payload["findings"][0]["diff"].splitlines()

    add_revisions(project, 3)  # rewrites 0001 as it was applied, adds 0003
    assert findings(check_db(project, code=1)) == [
        ("FM401", "migrations/versions/0003_t3.py:9", "0003 is not applied to the database (database at 0002)"),
    ]
    project.remove_revision("0003")
    project.remove_revision("0002")
    assert findings(check_db(project, code=1)) == [
        (
            "FM403",
            None,
            "0002 is applied in the database, but no revision file in migrations/versions has it "
            "(the ledger has it under token 34 by agent-A)",
        ),
    ]
    assert mysql_snapshot(mysql_url) == before


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("DROP TRIGGER fencemigrate_lease_no_delete", "trigger fencemigrate_lease_no_delete is missing"),
        (
            "CREATE OR REPLACE TRIGGER fencemigrate_agent_fence_monotonic BEFORE UPDATE ON fencemigrate_agent_fence "
            "FOR EACH ROW SET NEW.updated_at = UTC_TIMESTAMP(6)",
            "trigger fencemigrate_agent_fence_monotonic was changed: it is now `CREATE TRIGGER "
            "fencemigrate_agent_fence_monotonic BEFORE UPDATE ON fencemigrate_agent_fence FOR EACH ROW "
            "SET NEW.updated_at = UTC_TIMESTAMP(6)`",
        ),
        (
            "DROP TRIGGER fencemigrate_agent_fence_no_delete",
            "trigger fencemigrate_agent_fence_no_delete is missing",
        ),
        ("DROP TABLE fencemigrate_fence_event", "table fencemigrate_fence_event is missing"),
    ],
)
def test_mysql_an_altered_fence_schema_is_reported(
    make_project: MakeProject, mysql_url: str, sql: str, problem: str
) -> None:
    project = make_project(url=mysql_url)
    add_revisions(project, 1)
    apply(project)
    mysql_rows(mysql_url, sql)
    payload = check_db(project, code=1)
    assert findings(payload) == [("FM405", None, MYSQL_ALTERED.format(problem=problem))]
    assert payload["findings"][0]["fix"] == ALTERED_FIX


def test_mysql_a_dropped_guard_really_lets_the_fence_go_down(make_project: MakeProject, mysql_url: str) -> None:
    """With the guard trigger, lowering the fence is refused; without it (reported), any client can."""
    project = make_project(url=mysql_url)
    add_revisions(project, 1)
    apply(project)
    with pytest.raises(pymysql.err.OperationalError, match="a fence token cannot go down"):
        mysql_rows(mysql_url, "UPDATE fencemigrate_agent_fence SET token = 1")
    assert fence_tokens(mysql_url) == {"db/migrations": 34}

    mysql_rows(mysql_url, "DROP TRIGGER fencemigrate_agent_fence_monotonic")
    result = project.run_cli("check", "--db", "--format", "github").check(1)
    assert result.stdout.splitlines() == [
        "::error title=FM405 fence-schema-altered::"
        + MYSQL_ALTERED.format(problem="trigger fencemigrate_agent_fence_monotonic is missing")
        + f"%0Afix: {ALTERED_FIX}",
        f"1 error, 0 warnings in 1 revision file, database checked{NO_MODELS}",
    ]
    mysql_rows(mysql_url, "UPDATE fencemigrate_agent_fence SET token = 1")
    assert fence_tokens(mysql_url) == {"db/migrations": 1}


def test_mysql_a_dirty_revision_is_reported(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    project.add_revision("0001", None, ["CREATE TABLE one (id int PRIMARY KEY)"], ["DROP TABLE one"], slug="one")
    second = project.add_revision(
        "0002",
        "0001",
        ["CREATE TABLE half (id int PRIMARY KEY)", "SELECT * FROM missing_table"],
        ["DROP TABLE half"],
        slug="half",
    )
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check(1)
    assert ledger(mysql_url) == {"0001": (5, "agent-A", "applied"), "0002": (5, "agent-A", "applying")}
    since = json.loads(project.run_cli("state", "--json").check(0).stdout)["dirty"][0]["since"]
    before = mysql_snapshot(mysql_url)

    message = (
        f"0002 is dirty: its upgrade was started under token 5 by agent-A at {since} and never finished "
        "(alembic_version); fenced writes are refused until it is resolved"
    )
    fix = (
        "compare the schema with 0002, finish or undo what it did by hand, then "
        "`fencemigrate resolve 0002 --token N --as applied|rolled-back`"
    )
    payload = check_db(project, code=1)
    assert findings(payload) == [("FM406", "migrations/versions/0002_half.py:9", message)]
    assert (payload["findings"][0]["fix"], payload["findings"][0]["revision"]) == (fix, "0002")
    # Fixing the file is the way out, not drift: the dirty revision is still the one finding.
    second.write_text(second.read_text().replace("SELECT * FROM missing_table", "SELECT 1"))
    assert findings(check_db(project, code=1)) == [("FM406", "migrations/versions/0002_half.py:9", message)]
    assert mysql_snapshot(mysql_url) == before

    # Undone by hand and resolved as rolled back: 0002 is pending; applied, all is well.
    mysql_rows(mysql_url, "DROP TABLE half")
    project.run_cli("resolve", "0002", "--token", "6", "--as", "rolled-back").check(0)
    assert findings(check_db(project, code=1)) == [
        ("FM401", "migrations/versions/0002_half.py:9", "0002 is not applied to the database (database at 0001)"),
    ]
    project.run_cli("upgrade", "head", "--token", "6").check(0)
    assert project.run_cli("check", "--db").check(0).stdout == (
        f"no problems found in 2 revision files, database checked{NO_MODELS}\n"
    )

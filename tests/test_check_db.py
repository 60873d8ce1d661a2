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

import pytest
from sqlite_rows import make_sqlite_project, snapshot
from support.db import alembic_versions, execute, query
from support.project import Project, Result

DRIFT_FIX = "restore the file as it was applied (`git log -p -- {path}`), and make the change in a new revision"
ALTERED_FIX = (
    "find out who changed it (stale writers may get through), then recreate it as fencemigrate's "
    "install script has it (`fencemigrate install --sql`; sql/sqlite/ on SQLite)"
)


def add_revisions(project: Project, count: int) -> list[Path]:
    """Revisions 0001..000<count>, each creating table t<n>."""
    return [
        project.add_revision(
            f"{n:04d}", None if n == 1 else f"{n - 1:04d}", f"CREATE TABLE t{n} (id int)", f"DROP TABLE t{n}",
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
    assert result.stdout == "no problems found in 2 revision files, database checked\n"


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
    assert payload["findings"][0]["fix"] == DRIFT_FIX.format(path=path)
    assert (payload["status"], payload["database_checked"]) == ("failed", True)
    assert pg_snapshot(project.url) == before
    # Without --db only the files are read: the drift cannot be seen.
    assert project.run_cli("check").check(0).stdout == "no problems found in 2 revision files\n"


def test_a_revision_not_applied_yet_is_pending(project: Project) -> None:
    add_revisions(project, 2)
    apply(project)
    add_revisions(project, 3)
    payload = check_db(project, code=1)
    assert findings(payload) == [
        ("FM401", "migrations/versions/0003_t3.py:9", "0003 is not applied to the database (database at 0002)"),
    ]
    result = project.run_cli("check", "--db", "--ignore", "pending-revision").check(0)
    assert result.stdout == "no problems found in 3 revision files, database checked\n"


def test_an_applied_revision_whose_file_is_gone_is_reported(project: Project) -> None:
    add_revisions(project, 2)
    apply(project)
    project.remove_revision("0002")
    payload = check_db(project, code=1)
    assert findings(payload) == [
        (
            "FM403", None,
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
        ("ALTER TABLE fencemigrate.agent_fence DISABLE TRIGGER agent_fence_no_truncate",
         "trigger agent_fence_no_truncate is disabled"),
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
        ("DROP TABLE fencemigrate.lease", "table lease is missing"),
    ],
)
def test_an_altered_fence_schema_is_reported(project: Project, sql: str, problem: str) -> None:
    add_revisions(project, 1)
    apply(project)
    execute(project.url, sql)
    payload = check_db(project, code=1)
    message = f"the fence schema fencemigrate (0.2) differs from fencemigrate's: {problem}"
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
        "::error title=FM405 fence-schema-altered::the fence schema fencemigrate (0.2) differs from "
        f"fencemigrate's: trigger agent_fence_monotonic is missing%0Afix: {ALTERED_FIX}",
        "1 error, 0 warnings in 1 revision file, database checked",
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
        "no problems found in 2 revision files, database checked\n"
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
            "FM402", "migrations/versions/0001_t1.py:9",
            f"0001 changed after it was applied: its sha256 is now {edited[:12]}, the ledger has {applied[:12]} "
            f"(applied under token 34 by agent-A at {row['applied_at']})",
        ),
        (
            "FM405", None,
            "the fence schema fencemigrate (0.2) differs from fencemigrate's: "
            "trigger fencemigrate_agent_fence_no_lowering is missing",
        ),
    ]
    assert snapshot(database) == before


def test_check_without_db_needs_no_database(project: Project) -> None:
    add_revisions(project, 1)
    project.set_url("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    result: Result = project.run_cli("check").check(0)
    assert result.stdout == "no problems found in 1 revision file\n"

"""Fenced runs on SQLite (pysqlite, ``sqlite:///file``), with an unmodified ``alembic init`` env.py.

The claim, the revision's DDL and the ledger rows commit or roll back together, as on PostgreSQL:
fencemigrate gives SQLite transactional DDL while it runs env.py. Controls: plain ``alembic`` on
SQLite lets the stale writes through, and leaves half of a failing revision behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.fence_rows import stderr_lines, without_progress
from support.incident_story import (
    A_COLUMNS,
    B_COLUMNS,
    STALE_REASON,
    assert_fenced_json,
    assert_fenced_text,
    clone_checkout,
    fm,
    replay_with_plain_alembic,
    write_a_0042,
    write_a_0043,
    write_b_0042,
)
from support.project import Project, Result, sqlite_url
from support.sqlite_rows import (
    alembic_versions,
    column_names,
    events,
    fence_installed,
    fence_tokens,
    ledger,
    make_sqlite_project,
    query,
    snapshot,
    table_names,
    user_tables,
)

from fencemigrate.dialects import dialect_for

SQLITE_VERSION = dialect_for("sqlite").schema_version()

INVALID_SQL = "CREATE TABLE broken_syntax (id int,)"


def database(project: Project) -> Path:
    """The SQLite file a project points at."""
    return Path(project.url.removeprefix("sqlite:///"))


def add_good(project: Project, rev: str, down: str | None, table: str) -> None:
    """A revision creating ``table``."""
    project.add_revision(rev, down, f"CREATE TABLE {table} (id int)", f"DROP TABLE {table}", slug=table)


def add_failing(project: Project, rev: str, down: str | None, table: str) -> None:
    """A revision whose first statement creates ``table`` and whose second is invalid SQL."""
    project.add_revision(rev, down, [f"CREATE TABLE {table} (id int)", INVALID_SQL], f"DROP TABLE {table}", slug=table)


def assert_one_error_line(result: Result, *fragments: str) -> None:
    """Exit 1, empty stdout, one ``fencemigrate: error:`` line on stderr (after the progress), no traceback."""
    result.check(1)
    assert result.stdout == "", result
    assert "Traceback" not in result.stderr, result
    lines = without_progress(stderr_lines(result.stderr))
    assert len(lines) == 1 and lines[0].startswith("fencemigrate: error: "), result
    for fragment in fragments:
        assert fragment in lines[0], result


def upgrade_json(project: Project, token: int, revision: str = "head") -> dict[str, Any]:
    """``fencemigrate upgrade REV --token N --json``, exit 0, its JSON object."""
    result = project.run_cli("upgrade", revision, "--token", str(token), "--holder", "agent", "--json").check(0)
    payload: dict[str, Any] = json.loads(result.stdout)
    return payload


# -- the incident ------------------------------------------------------------------------------


def assert_b_schema(db: Path, fence: int = 34) -> None:
    """B's 0042 is what the database holds: B's columns and row, version 0042, B's ledger row."""
    assert column_names(db, "invoice_currency") == B_COLUMNS
    assert query(db, "SELECT invoice_id, currency_code FROM invoice_currency") == [(1, "USD")]
    assert alembic_versions(db) == ["0042"]
    assert ledger(db) == {"0042": (34, "agent-B", "upgrade")}
    assert fence_tokens(db) == {"db/migrations": fence}


def test_incident_on_sqlite(tmp_path: Path) -> None:
    """Token 33's stale reapply of 0042 and its renumbered 0043 are FENCED and change nothing; plain
    alembic lets both through."""
    a = make_sqlite_project(tmp_path, "agent_a")
    pristine = clone_checkout(a, "pristine", a.url)
    b = clone_checkout(a, "agent_b", a.url)
    db = database(a)

    write_a_0042(a)
    assert "  applied 0042 under token 33" in fm(a, "upgrade", "head", token=33, holder="agent-A").check(0).stdout
    assert column_names(db, "invoice_currency") == A_COLUMNS
    write_a_0042(b)
    assert "  rolled back 0042 under token 34" in fm(b, "downgrade", "base", token=34, holder="agent-B").check(0).stdout
    write_b_0042(b)
    fm(b, "upgrade", "head", token=34, holder="agent-B").check(0)
    assert_b_schema(db)
    assert events(db) == [
        ("APPLY", "agent-A", 33, "0042"),
        ("ROLLBACK", "agent-B", 34, "0042"),
        ("APPLY", "agent-B", 34, "0042"),
    ]
    before = snapshot(db)

    # A wakes up and re-applies its 0042, then renumbers it to 0043: both FENCED, nothing changes.
    assert_fenced_text(fm(a, "reapply", "0042", token=33, holder="agent-A"), token=33, fence=34)
    assert snapshot(db) == before
    assert_fenced_json(fm(a, "reapply", "0042", token=33, holder="agent-A", as_json=True), 33, 34, STALE_REASON)
    assert snapshot(db) == before
    write_a_0043(a)
    assert_fenced_text(fm(a, "upgrade", "head", token=33, holder="agent-A"), token=33, fence=34)
    assert_fenced_json(fm(a, "upgrade", "head", token=33, holder="agent-A", as_json=True), 33, 34, STALE_REASON)
    assert snapshot(db) == before
    assert_b_schema(db)
    assert len(events(db, "APPLY", "ROLLBACK", "STAMP")) == 3  # nothing applied or rolled back since

    # CONTROL: plain alembic, same steps on another file: A's reapply, then its 0043, go through.
    control = clone_checkout(pristine, "control_a", sqlite_url(tmp_path / "control.sqlite"))
    control_b = clone_checkout(pristine, "control_b", control.url)
    control_db = database(control)
    replay_with_plain_alembic(control, control_b)
    assert column_names(control_db, "invoice_currency") == B_COLUMNS
    control.run_alembic("downgrade", "base").check(0)
    control.run_alembic("upgrade", "head").check(0)
    assert column_names(control_db, "invoice_currency") == A_COLUMNS, "control: B's table should be gone"
    assert query(control_db, "SELECT count(*) FROM invoice_currency") == [(0,)]
    write_a_0043(control)
    control.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(control_db) == ["0043"]


# -- atomicity ---------------------------------------------------------------------------------


@pytest.mark.parametrize("earlier_run", [False, True], ids=["first-run", "after-upgrade-under-5"])
def test_revision_failing_halfway_leaves_nothing(tmp_path: Path, earlier_run: bool) -> None:
    """DDL, ledger row, version row and fence claim roll back together (a first run's fence schema and
    guarded, empty version table were committed before its first revision: issue 24, 8(f)); plain
    alembic on SQLite leaves the revision's first table behind."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_good(project, "0001", None, "first_table")
    if earlier_run:
        project.run_cli("upgrade", "head", "--token", "5", "--holder", "earlier").check(0)
    add_failing(project, "0002", "0001", "half_done")
    before = snapshot(db) if earlier_run else None

    for json_flag in ([], ["--json"]):
        out = project.run_cli("upgrade", "head", "--token", "9", "--holder", "failing", *json_flag)
        if json_flag:
            out.check(1)
            payload = json.loads(out.stdout)
            assert payload["status"] == "error" and "syntax error" in payload["message"], out
        else:
            assert_one_error_line(out, "database error", "syntax error")
        before = before or snapshot(db)  # first run: what it committed before its first revision
        assert snapshot(db) == before
        assert "half_done" not in table_names(db)
        assert ("first_table" in table_names(db)) == earlier_run  # 0001 was in the same transaction
        assert (alembic_versions(db) or []) == (["0001"] if earlier_run else [])
        assert ledger(db) == ({"0001": (5, "earlier", "upgrade")} if earlier_run else {})
        assert fence_tokens(db) == ({"db/migrations": 5} if earlier_run else {})  # token 9 never committed
        assert fence_installed(db)

    # CONTROL: plain alembic on SQLite commits each DDL statement on its own (its version writes allowed).
    project.allow_tokenless_writes()
    project.run_alembic("upgrade", "head").check(1)
    assert "half_done" in table_names(db), "control: the failing revision's first table should remain"
    assert alembic_versions(db) == ["0001"]  # and 0001, in the same run, stays committed


def test_transaction_per_migration_keeps_the_steps_before_the_failure(tmp_path: Path) -> None:
    """With transaction_per_migration=True, 0001..0002 commit under token 7 and the failing 0003 leaves nothing."""
    project = make_sqlite_project(tmp_path)
    project.set_env_option("transaction_per_migration", True)
    db = database(project)
    add_good(project, "0001", None, "t1")
    add_good(project, "0002", "0001", "t2")
    add_failing(project, "0003", "0002", "t3")

    assert_one_error_line(
        project.run_cli("upgrade", "head", "--token", "7", "--holder", "per-migration"), "syntax error"
    )
    assert user_tables(db) == ["t1", "t2"]
    assert alembic_versions(db) == ["0002"]
    assert ledger(db) == {"0001": (7, "per-migration", "upgrade"), "0002": (7, "per-migration", "upgrade")}
    assert fence_tokens(db) == {"db/migrations": 7}
    assert events(db) == [("APPLY", "per-migration", 7, "0001"), ("APPLY", "per-migration", 7, "0002")]

    add_good(project, "0003", "0002", "t3")
    payload = upgrade_json(project, 8)
    assert payload["steps"] == [
        {"revisions": ["0003"], "direction": "up", "action": "applied", "token": 8, "atomic": True}
    ]
    assert alembic_versions(db) == ["0003"]
    assert ledger(db)["0003"] == (8, "agent", "upgrade")


# -- ledger, events, stamp and state -------------------------------------------------------------


def test_downgrade_removes_ledger_rows_and_logs_rollback(tmp_path: Path) -> None:
    """Upgrade logs APPLY, downgrade deletes the ledger rows and logs ROLLBACK, stamp logs STAMP, in order."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_good(project, "0001", None, "t1")
    add_good(project, "0002", "0001", "t2")
    upgrade_json(project, 3)
    assert ledger(db) == {"0001": (3, "agent", "upgrade"), "0002": (3, "agent", "upgrade")}

    out = project.run_cli("downgrade", "base", "--token", "4", "--holder", "undoer", "--json").check(0)
    assert [(s["revisions"], s["direction"], s["atomic"]) for s in json.loads(out.stdout)["steps"]] == [
        (["0002"], "down", True),
        (["0001"], "down", True),
    ]
    assert user_tables(db) == []
    assert alembic_versions(db) == []
    assert ledger(db) == {}
    assert fence_tokens(db) == {"db/migrations": 4}

    project.run_cli("stamp", "0001", "--token", "4", "--holder", "stamper").check(0)
    assert ledger(db) == {"0001": (4, "stamper", "stamp")}
    assert events(db) == [
        ("APPLY", "agent", 3, "0001"),
        ("APPLY", "agent", 3, "0002"),
        ("ROLLBACK", "undoer", 4, "0002"),
        ("ROLLBACK", "undoer", 4, "0001"),
        ("STAMP", "stamper", 4, "0001"),
    ]
    stamps = query(db, "SELECT at FROM fencemigrate_fence_event WHERE kind = 'STAMP'")
    assert len(stamps) == 1 and stamps[0][0].endswith("Z") and "T" in stamps[0][0]  # ISO 8601 UTC text


def test_state_text_and_json(tmp_path: Path) -> None:
    """state reads heads, fences and the ledger from SQLite, before and after a fenced run."""
    project = make_sqlite_project(tmp_path)
    add_good(project, "0001", None, "t1")
    (tmp_path / "db.sqlite").touch()  # an empty database: state never creates a missing file
    assert project.run_cli("state").check(0).stdout == (
        "heads: (none)\nfence schema: not installed (no fenced run has written here yet)\n"
    )
    upgrade_json(project, 12)

    payload = json.loads(project.run_cli("state", "--json").check(0).stdout)
    assert payload["status"] == "ok"
    assert payload["version_table"] == "alembic_version"
    assert payload["heads"] == ["0001"]
    assert payload["fence_schema_version"] == SQLITE_VERSION
    assert [(f["resource"], f["token"]) for f in payload["fences"]] == [("db/migrations", 12)]
    (row,) = payload["ledger"]
    assert (row["revision"], row["resource"], row["applied_token"], row["holder"], row["method"]) == (
        "0001",
        "db/migrations",
        12,
        "agent",
        "upgrade",
    )
    assert len(row["script_sha256"]) == 64
    assert row["applied_at"].endswith("Z")

    lines = project.run_cli("state").check(0).stdout.splitlines()
    assert lines[:2] == ["heads: 0001", f"fence schema: {SQLITE_VERSION}"]
    assert any(line.startswith("  db/migrations  token=12  since ") for line in lines), lines
    assert any(line.startswith("  0001  applied_token=12  holder=agent  upgrade at ") for line in lines), lines


# -- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [("upgrade", "head"), ("downgrade", "0001:base"), ("stamp", "head")], ids=["upgrade", "downgrade", "stamp"]
)
def test_offline_sql_on_sqlite_writes_a_script_without_connecting(tmp_path: Path, args: tuple[str, ...]) -> None:
    """--sql on SQLite (with a token or without): exit 0 and a script for the sqlite3 shell, the
    database never opened (tests/test_sqlite_offline_script.py runs such scripts)."""
    project = make_sqlite_project(tmp_path)
    add_good(project, "0001", None, "t1")
    db = database(project)

    for token in (["--token", "5"], []):
        out = project.run_cli(*args, *token, "--sql").check(0)
        assert out.stdout.splitlines()[1:3] == [".bail on", ".timeout 600000"], out
        assert "BEGIN IMMEDIATE;" in out.stdout.splitlines()
    assert not db.exists()  # offline runs never connect


AUTOCOMMIT_ENVS = {
    "engine-isolation-level": (
        "poolclass=pool.NullPool,",
        'poolclass=pool.NullPool,\n        isolation_level="AUTOCOMMIT",',
    ),
    "connection-execution-options": (
        "with connectable.connect() as connection:",
        'with connectable.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:',
    ),
}


@pytest.mark.parametrize("edit", list(AUTOCOMMIT_ENVS.values()), ids=list(AUTOCOMMIT_ENVS))
def test_autocommit_connection_is_refused(tmp_path: Path, edit: tuple[str, str]) -> None:
    """An AUTOCOMMIT connection cannot share a transaction with the claim: refused at configure
    time, nothing written (not even Alembic's version table); plain alembic applies the revision."""
    project = make_sqlite_project(tmp_path)
    project.edit_env(*edit)
    add_good(project, "0001", None, "t1")
    db = database(project)

    assert_one_error_line(project.run_cli("upgrade", "head", "--token", "5"), "autocommit")
    assert table_names(db) == []

    project.run_alembic("upgrade", "head").check(0)
    assert "t1" in table_names(db)


def test_connection_without_the_sqlite_recipe_is_refused(tmp_path: Path) -> None:
    """Plain ``alembic -x fence_token=5`` with a fence-aware env.py runs without fencemigrate's SQLite
    recipe, so its DDL would commit on its own: refused, nothing of the revision applied."""
    root = tmp_path / "fenced"
    root.mkdir()
    project = Project(path=root, url=sqlite_url(tmp_path / "db.sqlite"), template="fencemigrate")
    project.run_cli("init", "migrations").check(0)
    project.set_url(project.url)
    add_good(project, "0001", None, "t1")
    db = database(project)

    out = project.run_alembic("-x", "fence_token=5", "upgrade", "head")
    out.check(1)
    assert "autocommit" in out.stderr and "nothing was applied" in out.stderr, out
    assert user_tables(db) == []
    assert not alembic_versions(db)
    assert not fence_installed(db)

    # Through fencemigrate the same env.py is fenced and transactional.
    assert "  applied 0001 under token 5" in project.run_cli("upgrade", "head", "--token", "5").check(0).stdout
    assert ledger(db)["0001"][0] == 5


# -- commits inside a revision: the SQLite transaction number -----------------------------------

_RAW_COMMIT_THEN_NEWER_TOKEN = """
    import sqlite3
    op.execute("CREATE TABLE IF NOT EXISTS before_commit (id int)")
    {commit}
    other = sqlite3.connect({db!r}, isolation_level=None)  # another writer, now that the lock is free
    other.execute("UPDATE fencemigrate_agent_fence SET token = 99 WHERE resource = 'db/migrations'")
    other.close()
    op.execute("CREATE TABLE after_commit (id int)")
"""

COMMITS = {
    "raw-dbapi-commit": "op.get_bind().connection.dbapi_connection.commit()  # behind SQLAlchemy's back",
    "commit-statement": 'op.execute("COMMIT")',
    "sqlalchemy-commit": "op.get_bind().commit()",
}


@pytest.mark.parametrize("commit", list(COMMITS.values()), ids=list(COMMITS))
def test_commit_inside_a_revision_is_caught_before_the_ledger_row(tmp_path: Path, commit: str) -> None:
    """A revision commits midway and a newer token writes: the ledger write sees another transaction
    number, claims again and is FENCED; the rest of the revision rolls back. Plain alembic runs it all."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_good(project, "a1", None, "t1")
    upgrade_json(project, 7)
    code = _RAW_COMMIT_THEN_NEWER_TOKEN.format(commit=commit, db=str(db))
    project.add_revision("b2", "a1", (), slug="commit", extra_upgrade_code=code)

    out = project.run_cli("upgrade", "head", "--token", "8")
    out.check(3)
    # the fence was raised by hand: no write under token 99 is logged
    assert "Your lease token (8) is older than token 99, which was granted after yours (it has not written yet)." in (
        out.stderr
    )
    assert user_tables(db) == ["before_commit", "t1"]  # committed by the revision itself
    assert alembic_versions(db) == ["a1"]
    assert ledger(db) == {"a1": (7, "agent", "upgrade")}
    assert fence_tokens(db) == {"db/migrations": 99}

    # Control: plain alembic (every statement commits on its own on SQLite) runs the revision to
    # the end despite the newer token.
    plain = _RAW_COMMIT_THEN_NEWER_TOKEN.format(commit="pass", db=str(db))
    project.add_revision("b2", "a1", (), slug="commit", extra_upgrade_code=plain)
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert "after_commit" in table_names(db)
    assert alembic_versions(db) == ["b2"]


SPLITTING_COMMITS = {name: COMMITS[name] for name in ("raw-dbapi-commit", "commit-statement")}


@pytest.mark.parametrize("commit", list(SPLITTING_COMMITS.values()), ids=list(SPLITTING_COMMITS))
def test_commit_inside_a_revision_is_reclaimed_and_reported_non_atomic(tmp_path: Path, commit: str) -> None:
    """Without a newer token, the run completes: every revision and ledger row lands, and the steps
    the commit split are reported non-atomic. (A SQLAlchemy commit() inside Alembic's transaction
    is left out: Alembic then commits only the transaction it began, on any database.)"""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_good(project, "a1", None, "t1")
    code = (
        f'op.execute("CREATE TABLE before_commit (id int)")\n{commit}\nop.execute("CREATE TABLE after_commit (id int)")'
    )
    project.add_revision("b2", "a1", (), slug="commit", extra_upgrade_code=code)
    add_good(project, "c3", "b2", "t3")

    payload = upgrade_json(project, 12)
    atomic = {tuple(step["revisions"]): step["atomic"] for step in payload["steps"]}
    assert atomic[("b2",)] is False
    assert user_tables(db) == ["after_commit", "before_commit", "t1", "t3"]
    assert alembic_versions(db) == ["c3"]
    assert ledger(db) == {rev: (12, "agent", "upgrade") for rev in ("a1", "b2", "c3")}
    assert fence_tokens(db) == {"db/migrations": 12}

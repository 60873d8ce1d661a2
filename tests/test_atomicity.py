"""A fenced step is atomic: claim, DDL and ledger commit together or not at all.

* A revision failing halfway leaves no DDL, no ledger row, no version change and the
  OLD fence token (the new token's claim rolls back with it); exit 1, one clear line.
* With ``transaction_per_migration=True`` the revisions before the failing one stay
  committed under the token; the failing one leaves nothing.
* An env.py whose connection is in autocommit mode is refused (fail closed) before
  anything is applied; plain alembic on the same env.py applies the revision.
"""

from __future__ import annotations

import json

import pytest
from support.db import alembic_versions, table_exists
from support.fence_rows import (
    LedgerEntry,
    fence_installed,
    fence_tokens,
    ledger,
    ledger_tokens,
    stderr_lines,
    without_progress,
)
from support.project import Project, Result

INVALID_SQL = "CREATE TABLE broken_syntax ("


def add_good(project: Project, rev: str, down: str | None, table: str) -> None:
    """A revision creating ``table``."""
    project.add_revision(rev, down, f"CREATE TABLE {table} (id int)", f"DROP TABLE {table}", slug=table)


def add_failing(project: Project, rev: str, down: str | None, table: str) -> None:
    """A revision whose first statement creates ``table`` and whose second is invalid SQL."""
    project.add_revision(rev, down, [f"CREATE TABLE {table} (id int)", INVALID_SQL], f"DROP TABLE {table}", slug=table)


def assert_one_error_line(result: Result, *fragments: str) -> str:
    """Exit 1, empty stdout, exactly one ``fencemigrate: error:`` line on stderr (after the progress),
    no traceback."""
    result.check(1)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr, result
    lines = without_progress(stderr_lines(result.stderr))
    assert len(lines) == 1, result
    assert lines[0].startswith("fencemigrate: error: "), result
    for fragment in fragments:
        assert fragment in lines[0].lower(), result
    return lines[0]


def assert_json_error(result: Result, *fragments: str) -> None:
    """Exit 1 and one JSON object ``{"status": "error", "message": ...}`` on stdout."""
    result.check(1)
    assert "Traceback" not in result.stderr, result
    assert len(result.stdout.strip().splitlines()) == 1, result
    payload = json.loads(result.stdout)
    assert payload["status"] == "error"
    for fragment in fragments:
        assert fragment in payload["message"].lower(), result


@pytest.mark.parametrize("earlier_run", [False, True], ids=["first-run", "after-upgrade-under-5"])
def test_revision_failing_halfway_leaves_nothing(project: Project, pg_url: str, earlier_run: bool) -> None:
    """DDL, ledger row, version row and the fence claim of token 9 all roll back with the failing revision;
    the fence schema and the guarded, empty version table a first run committed before its first
    revision stay (issue 24, 8(f): plain alembic stays refused)."""
    add_good(project, "0001", None, "first_table")
    if earlier_run:
        project.run_cli("upgrade", "head", "--token", "5", "--holder", "earlier").check(0)
        before_versions, before_ledger, before_fences = ["0001"], {"0001": 5}, {"db/migrations": 5}
    else:
        before_versions, before_ledger, before_fences = [], {}, {}
    add_failing(project, "0002", "0001", "half_done")

    for as_json in (False, True):
        out = project.run_cli(
            "upgrade", "head", "--token", "9", "--holder", "failing", *(["--json"] if as_json else [])
        )
        if as_json:
            assert_json_error(out, "syntax error")
        else:
            assert_one_error_line(out, "database error", "syntax error")
        assert not table_exists(pg_url, "half_done")
        assert table_exists(pg_url, "first_table") == earlier_run  # 0001 was in the same transaction
        assert (alembic_versions(pg_url) or []) == before_versions
        assert ledger_tokens(pg_url) == before_ledger
        assert fence_tokens(pg_url) == before_fences  # token 9 never committed
        assert fence_installed(pg_url)  # committed before the first revision ran


def test_transaction_per_migration_keeps_the_steps_before_the_failure(project: Project, pg_url: str) -> None:
    """With transaction_per_migration=True, 0001..0002 commit under token 7 and the failing 0003 leaves nothing."""
    project.set_env_option("transaction_per_migration", True)
    add_good(project, "0001", None, "t1")
    add_good(project, "0002", "0001", "t2")
    add_failing(project, "0003", "0002", "t3")

    out = project.run_cli("upgrade", "head", "--token", "7", "--holder", "per-migration")
    assert_one_error_line(out, "syntax error")
    assert table_exists(pg_url, "t1") and table_exists(pg_url, "t2")
    assert not table_exists(pg_url, "t3")
    assert alembic_versions(pg_url) == ["0002"]
    assert ledger(pg_url) == {
        "0001": LedgerEntry("0001", 7, "per-migration", "upgrade"),
        "0002": LedgerEntry("0002", 7, "per-migration", "upgrade"),
    }
    assert fence_tokens(pg_url) == {"db/migrations": 7}


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
def test_autocommit_env_is_refused_before_anything_is_applied(
    project: Project, pg_url: str, edit: tuple[str, str]
) -> None:
    """An autocommit connection cannot share a transaction with the claim: refused, nothing applied;
    alembic applies it."""
    project.edit_env(*edit)
    add_good(project, "0001", None, "t1")

    out = project.run_cli("upgrade", "head", "--token", "5", "--holder", "autocommit")
    assert_one_error_line(out, "autocommit")
    assert not table_exists(pg_url, "t1")
    assert alembic_versions(pg_url) is None  # refused at configure time: not even Alembic's version table
    assert fence_tokens(pg_url) == {} and ledger(pg_url) == {}
    assert not fence_installed(pg_url)

    out = project.run_cli("upgrade", "head", "--token", "5", "--holder", "autocommit", "--json")
    assert_json_error(out, "autocommit")
    assert not table_exists(pg_url, "t1")

    # CONTROL: plain alembic on the very same env.py applies the revision.
    project.run_alembic("upgrade", "head").check(0)
    assert table_exists(pg_url, "t1")
    assert alembic_versions(pg_url) == ["0001"]

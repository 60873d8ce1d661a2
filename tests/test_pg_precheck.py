"""``--mode precheck`` on PostgreSQL: for revisions that cannot run in one transaction.

Each revision runs in a transaction of its own; its ledger row is marked and committed before
its DDL, under the resource's named lock (session advisory locks). A revision that fails after
an autocommit block committed part of it stays dirty, and then every fenced write, transactional
ones too, is refused until ``resolve``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from support.background_runs import finish, start, wait_for
from support.db import alembic_versions, query, table_names
from support.fence_rows import ledger
from support.project import MakeProject, Project, sqlite_url

ESCAPING_THEN_FAILING = """\
with op.get_context().autocommit_block():
    op.execute("CREATE TABLE committed_early (id int)")
op.execute("SELECT * FROM missing_table")
"""


def dirty_rows(url: str) -> list[tuple[str, str, int]]:
    return query(
        url,
        "SELECT revision, state, state_token FROM fencemigrate.applied_revision "
        "WHERE state <> 'applied' ORDER BY revision",
    )


def lock_holder(url: str) -> list[tuple[int]]:
    return query(
        url,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = 1718503790 "
        "AND objid = hashtext('db/migrations')::oid AND granted",
    )


def test_precheck_on_postgresql_marks_an_escaped_failure_dirty(project: Project, pg_url: str) -> None:
    project.add_revision("0001", None, ["CREATE TABLE one (id int)"], ["DROP TABLE one"])
    project.add_revision("0002", "0001", extra_upgrade_code=ESCAPING_THEN_FAILING)
    out = project.run_cli("upgrade", "0001", "--token", "5", "--mode", "precheck", "--json").check(0)
    assert json.loads(out.stdout)["mode"] == "precheck"
    assert ledger(pg_url)["0001"].applied_token == 5

    failed = project.run_cli("upgrade", "head", "--token", "5", "--mode", "precheck", "--holder", "agent-A")
    failed.check(1)
    assert re.search(
        r"^fencemigrate: error: revision 0002 \(migrations/versions/0002_rev\.py, line \d+, in upgrade\) "
        r"failed in pre-check mode: ",
        failed.stderr,
        re.MULTILINE,
    ), failed
    assert "committed_early" in table_names(pg_url)
    assert alembic_versions(pg_url) == ["0001"]
    assert dirty_rows(pg_url) == [("0002", "applying", 5)]

    # Transactional runs are refused too, and change nothing.
    for args in (("upgrade", "head", "--token", "6"), ("downgrade", "base", "--token", "6")):
        refused = project.run_cli(*args)
        refused.check(5)
        assert "DIRTY: revision 0002 of db/migrations did not finish" in refused.stderr
    assert query(pg_url, "SELECT token FROM fencemigrate.agent_fence") == [(5,)]
    state = json.loads(project.run_cli("state", "--json").check(0).stdout)
    assert [(d["revision"], d["state"], d["token"], d["holder"]) for d in state["dirty"]] == [
        ("0002", "applying", 5, "agent-A")
    ]

    project.run_cli("resolve", "0002", "--token", "6", "--as", "applied").check(0)
    assert alembic_versions(pg_url) == ["0002"]
    assert dirty_rows(pg_url) == []
    kinds = [row[0] for row in query(pg_url, "SELECT kind FROM fencemigrate.fence_event ORDER BY id")]
    assert kinds[-1] == "RESOLVE"
    project.run_cli("downgrade", "0001", "--token", "6").check(0)  # resolved: transactional runs work again
    assert alembic_versions(pg_url) == ["0001"]


@pytest.mark.serial
def test_precheck_writer_holds_the_named_lock_and_a_grant_waits_or_preempts(project: Project, pg_url: str) -> None:
    project.add_revision(
        "0001", None, extra_upgrade_code="import time\ntime.sleep(8)\nop.execute('CREATE TABLE late (id int)')"
    )
    writer = start(project, "upgrade", "head", "--token", "5", "--mode", "precheck", "--holder", "stale")
    wait_for(lambda: bool(lock_holder(pg_url)))
    busy = project.run_cli("upgrade", "head", "--token", "6", "--mode", "precheck", "--wait", "0.5s")
    busy.check(4)
    assert "another fencemigrate writer holds the named lock 'fencemigrate:" in busy.stderr
    assert project.run_cli("lease", "acquire", "--holder", "fresh", "--wait", "0.5s").code == 4
    grant = json.loads(project.run_cli("lease", "acquire", "--holder", "fresh", "--preempt", "--json").check(0).stdout)
    assert grant["lease"]["token"] == 6
    result = finish(writer)
    assert result.code != 0, result
    assert "late" not in table_names(pg_url)
    assert dirty_rows(pg_url) == [("0001", "applying", 5)]


def test_precheck_mode_is_refused_on_sqlite(make_project: MakeProject, tmp_path: Path) -> None:
    database = tmp_path / "app.db"
    project = make_project(url=sqlite_url(database))
    project.add_revision("0001", None, ["CREATE TABLE t (id int)"], ["DROP TABLE t"])
    result = project.run_cli("upgrade", "head", "--token", "1", "--mode", "precheck")
    result.check(2)
    assert result.stderr.splitlines()[-1] == (
        "fencemigrate: usage: --mode precheck is not available on SQLite: its DDL is transactional and the "
        "default mode fences every revision atomically. Nothing was changed"
    )
    tables = sqlite3.connect(database).execute("SELECT name FROM sqlite_master").fetchall() if database.exists() else []
    assert tables == []

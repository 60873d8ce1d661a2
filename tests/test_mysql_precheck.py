"""Pre-check mode on a real MariaDB: MySQL commits every DDL statement on its own.

The fence is claimed in its own committed transaction under the resource's named lock (held for
the whole run), checked again before each revision, and each revision's ledger row is marked
before its DDL and settled after it. Each safety test keeps a plain-alembic control.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from typing import Any

import pytest
from sqlalchemy.engine import make_url
from support.background_runs import SLOW_UPGRADE, finish, lock_holder, start, wait_for
from support.fence_rows import assert_fenced
from support.incident_story import (
    A_COLUMNS,
    B_COLUMNS,
    assert_fenced_text,
    clone_checkout,
    fm,
    replay_with_plain_alembic,
    write_a_0042,
    write_a_0043,
    write_b_0042,
)
from support.mysql_rows import app_tables, columns, events, fence_tokens, ledger, snapshot, versions
from support.mysql_server import create_test_database, drop_test_database, mysql_rows, mysql_table_names
from support.project import MakeProject, Project, Result, run_command, script_command

PRECHECK_LINE = (
    "  pre-check mode: the fence was checked before each revision under the resource's named lock; "
    "each revision was marked before its DDL and settled after it (an unfinished one stays dirty)"
)


def assert_b_schema(url: str, fence: int = 34) -> None:
    """B's 0042 is what the database holds: its columns and row, version 0042, B's ledger row."""
    assert columns(url, "invoice_currency") == B_COLUMNS
    assert mysql_rows(url, "SELECT invoice_id, currency_code FROM invoice_currency") == [(1, "USD")]
    assert versions(url) == ["0042"]
    assert ledger(url) == {"0042": (34, "agent-B", "applied")}
    assert fence_tokens(url) == {"db/migrations": fence}


def replay_until_b_applied(a: Project, b: Project) -> None:
    """A applies its 0042 under 33; B (34) rolls it back, rewrites it and applies its own."""
    write_a_0042(a)
    out = fm(a, "upgrade", "head", token=33, holder="agent-A").check(0)
    assert out.stdout.splitlines()[1:3] == [PRECHECK_LINE, "  installed the fence schema"]
    assert "  applied 0042 under token 33" in out.stdout.splitlines()
    write_a_0042(b)
    fm(b, "downgrade", "base", token=34, holder="agent-B").check(0)
    assert "invoice_currency" not in app_tables(b.url)
    write_b_0042(b)
    fm(b, "upgrade", "head", token=34, holder="agent-B").check(0)
    assert_b_schema(b.url)


def test_incident_replayed_in_precheck_mode(make_project: MakeProject, mysql_url: str) -> None:
    """A's stale reapply and renumbered 0043 are FENCED on MariaDB; B's 0042 survives."""
    a = make_project(url=mysql_url, name="agent_a")
    b = clone_checkout(a, "agent_b", mysql_url)
    replay_until_b_applied(a, b)
    before = snapshot(mysql_url)

    assert_fenced_text(fm(a, "reapply", "0042", token=33, holder="agent-A"), token=33, fence=34)
    assert snapshot(mysql_url) == before
    assert_b_schema(mysql_url)

    write_a_0043(a)
    assert_fenced_text(fm(a, "upgrade", "head", token=33, holder="agent-A"), token=33, fence=34)
    assert snapshot(mysql_url) == before

    # A reapply of B's revision under A's fresh token is not A's to make either, and moves nothing.
    out = fm(a, "reapply", "0042", token=35, holder="agent-A")
    out.check(3)
    assert "Rejected for token 35: 0042 was applied under token 34, not yours." in out.stderr
    assert snapshot(mysql_url) == before

    # A fresh token may apply the 0043 copy.
    out = fm(a, "upgrade", "head", token=35, holder="agent-A").check(0)
    assert "  applied 0043 under token 35" in out.stdout.splitlines()
    assert versions(mysql_url) == ["0043"]
    assert ledger(mysql_url) == {"0042": (34, "agent-B", "applied"), "0043": (35, "agent-A", "applied")}

    timeline = a.run_cli("timeline").check(0).stdout.splitlines()
    kinds = [line.split()[1] for line in timeline[1:]]
    assert kinds == ["APPLY", "ROLLBACK", "APPLY", "FENCED", "FENCED", "FENCED", "APPLY"], timeline
    assert timeline[4].endswith("FENCED   reapply 0042 by agent-A token=33 < 34")


def test_control_plain_alembic_lets_the_stale_writes_through(make_project: MakeProject, mysql_url: str) -> None:
    """CONTROL: the same replay with plain alembic on MariaDB destroys B's 0042."""
    a = make_project(url=mysql_url, name="agent_a")
    b = clone_checkout(a, "agent_b", mysql_url)
    replay_with_plain_alembic(a, b)
    # A's stale "reapply": roll back and apply its own 0042 again.
    a.run_alembic("downgrade", "base").check(0)
    a.run_alembic("upgrade", "head").check(0)
    assert columns(mysql_url, "invoice_currency") == A_COLUMNS  # B's table and row are gone
    assert mysql_rows(mysql_url, "SELECT * FROM invoice_currency") == []


# -- the named lock ----------------------------------------------------------------------------


@pytest.mark.serial
def test_two_writers_are_serialised_by_the_named_lock(make_project: MakeProject, mysql_url: str) -> None:
    """A second writer waits for the first's named lock (busy after --wait), then finds the work done."""
    project = make_project(url=mysql_url)
    project.add_revision("0001", None, extra_upgrade_code=SLOW_UPGRADE.format(seconds=8, table="slow"))
    first = start(project, "upgrade", "head", "--token", "5", "--holder", "first")
    wait_for(lambda: lock_holder(mysql_url) is not None)

    busy = project.run_cli("upgrade", "head", "--token", "6", "--holder", "second", "--wait", "0.5s")
    busy.check(4)
    assert busy.stderr.splitlines()[-1].startswith(
        "fencemigrate: busy: lease on db/migrations is busy: another fencemigrate writer holds the named lock "
        f"'fencemigrate:{mysql_url.rsplit('/', 1)[1]}/db/migrations' (connection "
    ), busy
    assert busy.stderr.rstrip().endswith("waited 500ms; this is transient, try again later")

    second = project.run_cli("upgrade", "head", "--token", "6", "--holder", "second", "--wait", "60s").check(0)
    first_result = finish(first)
    first_result.check(0)
    assert "  applied 0001 under token 5" in first_result.stdout.splitlines()
    assert "  nothing to do" in second.stdout.splitlines()
    assert ledger(mysql_url) == {"0001": (5, "first", "applied")}
    assert [event for event in events(mysql_url) if event[0] == "APPLY"] == [("APPLY", "first", 5, "0001")]
    # The second connected while the first still worked (8 s): with work to do, it waited for the
    # named lock and claimed; at head from the start it would have claimed nothing.
    assert fence_tokens(mysql_url) == {"db/migrations": 6}


@pytest.mark.serial
def test_control_two_plain_alembic_writers_collide(make_project: MakeProject, mysql_url: str) -> None:
    """CONTROL: two plain ``alembic upgrade head`` at once both run the revision; one fails midway."""
    project = make_project(url=mysql_url)
    project.add_revision("0000", None)
    project.add_revision("0001", "0000", extra_upgrade_code=SLOW_UPGRADE.format(seconds=2, table="slow"))
    project.run_alembic("upgrade", "0000").check(0)  # the version table exists: both race on 0001 only
    alembic = script_command("alembic")
    processes = [
        subprocess.Popen(
            alembic + ["upgrade", "head"], cwd=project.path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    codes = sorted(process.wait(timeout=120) for process in processes)
    assert codes == [0, 1]
    assert "Table 'slow' already exists" in "".join(p.stderr.read() for p in processes if p.stderr)


# -- dirty revisions ---------------------------------------------------------------------------


def add_half_failing(project: Project) -> None:
    """0001 fine; 0002 creates ``half`` and then fails."""
    project.add_revision("0001", None, ["CREATE TABLE one (id int PRIMARY KEY)"], ["DROP TABLE one"])
    project.add_revision(
        "0002", "0001", ["CREATE TABLE half (id int PRIMARY KEY)", "SELECT * FROM missing_table"], ["DROP TABLE half"]
    )


DIRTY_LINES = [
    "DIRTY: revision 0002 of db/migrations did not finish: its upgrade was started under token 5 by agent-A at ",
    "Its DDL may be partly applied (in pre-check mode statements commit before the revision ends).",
    "Nothing was run. Fenced writes to this resource are refused until this is resolved.",
    "Next step: compare the schema with the revision, finish or undo what it did by hand, then run",
    "`fencemigrate resolve 0002 --token N --as applied` (its DDL is all in) or",
    "`fencemigrate resolve 0002 --token N --as rolled-back` (none of it is left).",
]


def assert_dirty(result: Result) -> None:
    result.check(5)
    lines = result.stderr.splitlines()[-6:]
    assert lines[0].startswith(DIRTY_LINES[0]) and lines[0].endswith(" and never completed."), result
    assert lines[1:] == DIRTY_LINES[1:], result


def test_failed_revision_is_dirty_refuses_writes_and_is_resolved(make_project: MakeProject, mysql_url: str) -> None:
    """A revision failing after its first statement leaves it dirty; writes exit 5 until resolved."""
    project = make_project(url=mysql_url)
    add_half_failing(project)
    failed = project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A")
    failed.check(1)
    assert re.match(
        r"fencemigrate: error: revision 0002 \(migrations/versions/0002_\w+\.py, line \d+, in upgrade\) failed in "
        r"pre-check mode: database error: \(1146, ",
        failed.stderr.splitlines()[-1],
    ), failed
    assert "0002 is now marked dirty and fenced writes are refused" in failed.stderr
    assert "half" in app_tables(mysql_url)  # MySQL committed the first statement
    assert versions(mysql_url) == ["0001"]
    assert ledger(mysql_url) == {"0001": (5, "agent-A", "applied"), "0002": (5, "agent-A", "applying")}

    state = project.run_cli("state").check(0).stdout.splitlines()
    assert any(
        line.startswith("  0002  applied_token=5  holder=agent-A  upgrade at ") and line.endswith("  DIRTY (applying)")
        for line in state
    ), state
    assert state[-1].startswith("DIRTY: 0002 (alembic_version): upgrade started under token 5 by agent-A at ")
    payload = json.loads(project.run_cli("state", "--json").check(0).stdout)
    assert [(d["revision"], d["state"], d["token"], d["holder"]) for d in payload["dirty"]] == [
        ("0002", "applying", 5, "agent-A")
    ]

    before = snapshot(mysql_url)
    for args in (("upgrade", "head"), ("downgrade", "base"), ("stamp", "0002")):
        assert_dirty(project.run_cli(*args, "--token", "6"))
        assert snapshot(mysql_url) == before  # not even the fence moved
    refused = project.run_cli("upgrade", "head", "--token", "6", "--json")
    refused.check(5)
    assert json.loads(refused.stdout)["status"] == "dirty"

    # Plain alembic (the control) knows nothing: it retries 0002 and fails on the half-made table.
    project.run_alembic("upgrade", "head").check(1)

    # Undo by hand, then resolve as rolled back: the ledger row goes, the version stays at 0001.
    mysql_rows(mysql_url, "DROP TABLE half")
    resolved = project.run_cli("resolve", "0002", "--token", "6", "--as", "rolled-back", "--holder", "ops").check(0)
    assert resolved.stdout.splitlines() == [
        "resolved 0002 as rolled-back on db/migrations under token 6 (its applying under token 5 had not finished)",
        "  heads now: 0001",
    ]
    assert ledger(mysql_url) == {"0001": (5, "agent-A", "applied")}
    assert events(mysql_url)[-1] == ("RESOLVE", "ops", 6, "0002")
    timeline = project.run_cli("timeline").check(0).stdout.splitlines()
    assert timeline[-1].endswith(
        "RESOLVE  0002 by ops token=6 as rolled-back (its applying under token 5 never finished)"
    )

    # Fixed, it applies.
    project.add_revision("0002", "0001", ["CREATE TABLE half (id int PRIMARY KEY)"], ["DROP TABLE half"])
    project.run_cli("upgrade", "head", "--token", "6").check(0)
    assert versions(mysql_url) == ["0002"]
    assert ledger(mysql_url)["0002"][2] == "applied"


def test_a_revision_lowering_the_fence_is_fenced_and_dirty(make_project: MakeProject, mysql_url: str) -> None:
    """A revision whose write the monotonic guard refuses is a fencing refusal (exit 3, FM002), not a
    generic failure, and, its first statement committed, dirty."""
    project = make_project(url=mysql_url)
    project.add_revision("0001", None, ["CREATE TABLE one (id int PRIMARY KEY)"], ["DROP TABLE one"])
    project.add_revision(
        "0002",
        "0001",
        ["CREATE TABLE half (id int PRIMARY KEY)", "UPDATE fencemigrate_agent_fence SET token = 1"],
        ["DROP TABLE half"],
    )
    refused = project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A")
    refused.check(3)
    assert re.search(
        r"The fence's monotonic guard \(FM002\) refused a write by revision 0002 \(migrations/versions/0002_\w+\.py, "
        r"line \d+, in upgrade\): agent_fence is monotonic: a fence token cannot go down and a fenced resource "
        r"cannot be renamed; in pre-check mode a revision's statements can commit before it finishes, so part of "
        r"it may be in the database: 0002 is now marked dirty and fenced writes are refused\.",
        refused.stderr,
    ), refused.stderr
    assert "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply." in refused.stderr
    assert json.loads(project.run_cli("upgrade", "head", "--token", "5", "--json").stdout)["status"] == "dirty"
    assert fence_tokens(mysql_url) == {"db/migrations": 5}
    assert ledger(mysql_url) == {"0001": (5, "agent-A", "applied"), "0002": (5, "agent-A", "applying")}


def test_resolve_as_applied_moves_the_version_table(make_project: MakeProject, mysql_url: str) -> None:
    """Finished by hand, the revision is resolved as applied: version table and ledger say so."""
    project = make_project(url=mysql_url)
    add_half_failing(project)
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check(1)
    stale = project.run_cli("resolve", "0002", "--token", "4", "--as", "applied")
    assert_fenced_text(stale, token=4, fence=5)
    out = project.run_cli("resolve", "0002", "--token", "5", "--as", "applied", "--json").check(0)
    payload = json.loads(out.stdout)
    assert {k: payload[k] for k in ("status", "revision", "resolved_as", "was", "started_token", "heads")} == {
        "status": "ok",
        "revision": "0002",
        "resolved_as": "applied",
        "was": "applying",
        "started_token": 5,
        "heads": ["0002"],
    }
    assert versions(mysql_url) == ["0002"]
    assert ledger(mysql_url)["0002"] == (5, "agent-A", "applied")
    project.run_cli("upgrade", "head", "--token", "5").check(0)  # no longer dirty


def test_failed_downgrade_is_dirty_and_resolved_as_rolled_back(make_project: MakeProject, mysql_url: str) -> None:
    """A downgrade that fails midway is dirty too; resolved as rolled back, the version moves below it."""
    project = make_project(url=mysql_url)
    project.add_revision(
        "0001",
        None,
        ["CREATE TABLE a (id int)", "CREATE TABLE b (id int)"],
        ["DROP TABLE a", "DROP TABLE missing_table"],
    )
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check(0)
    project.run_cli("downgrade", "base", "--token", "5", "--holder", "agent-A").check(1)
    assert ledger(mysql_url) == {"0001": (5, "agent-A", "rolling_back")}
    assert versions(mysql_url) == ["0001"]
    out = project.run_cli("upgrade", "head", "--token", "5")
    out.check(5)
    assert "its downgrade was started under token 5 by agent-A" in out.stderr
    mysql_rows(mysql_url, "DROP TABLE b")
    project.run_cli("resolve", "0001", "--token", "5", "--as", "rolled-back").check(0)
    assert versions(mysql_url) == []
    assert ledger(mysql_url) == {}


def test_sigkill_mid_revision_releases_the_lock_and_leaves_the_revision_dirty(
    make_project: MakeProject, mysql_url: str
) -> None:
    """The server releases a killed writer's named lock; its half-done revision stays dirty."""
    project = make_project(url=mysql_url)
    project.add_revision(
        "0001",
        None,
        ["CREATE TABLE k1 (id int PRIMARY KEY)"],
        extra_upgrade_code="import time\ntime.sleep(120)\nop.execute('CREATE TABLE k2 (id int PRIMARY KEY)')",
    )
    writer = start(project, "upgrade", "head", "--token", "5", "--holder", "agent-A")
    wait_for(lambda: "k1" in mysql_table_names(mysql_url))
    assert lock_holder(mysql_url) is not None
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    wait_for(lambda: lock_holder(mysql_url) is None, timeout=30)

    assert_dirty_after_kill = project.run_cli("upgrade", "head", "--token", "6", "--wait", "10s")
    assert_dirty_after_kill.check(5)  # the lock was free: the dirty check ran
    assert (
        "DIRTY: revision 0001 of db/migrations did not finish: its upgrade was started under token 5 by agent-A"
        in assert_dirty_after_kill.stderr
    )
    assert app_tables(mysql_url) == ["alembic_version", "k1"]
    assert versions(mysql_url) == []
    state = json.loads(project.run_cli("state", "--json").check(0).stdout)
    assert [(d["revision"], d["state"], d["token"]) for d in state["dirty"]] == [("0001", "applying", 5)]


def test_mariadb_scheme_and_preinstalled_schema(make_project: MakeProject, mariadb_url: str) -> None:
    """mariadb+pymysql:// is pre-check mode too; `fencemigrate install` installs the MySQL schema."""
    project = make_project(url=mariadb_url)
    project.add_revision("0001", None, ["CREATE TABLE t (id int)"], ["DROP TABLE t"])
    assert project.run_cli("install").check(0).stdout.strip() == "installed"
    out = project.run_cli("upgrade", "head", "--token", "3", "--json").check(0)
    payload = json.loads(out.stdout)
    assert (payload["mode"], payload["installed_fence_schema"]) == ("precheck", False)
    assert [step["revisions"] for step in payload["steps"]] == [["0001"]]


def _fence_objects(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """The fence tables' columns and the guard triggers, as information_schema describes them."""
    return {
        "columns": mysql_rows(
            url,
            "SELECT table_name, column_name, column_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name LIKE 'fencemigrate\\_%' "
            "ORDER BY table_name, ordinal_position",
        ),
        "triggers": mysql_rows(
            url,
            "SELECT trigger_name, event_object_table, action_timing, event_manipulation, action_statement "
            "FROM information_schema.triggers WHERE event_object_schema = DATABASE() "
            "AND event_object_table LIKE 'fencemigrate\\_%' ORDER BY trigger_name",  # not the version table's guard
        ),
        "version": mysql_rows(url, "SELECT * FROM fencemigrate_schema_version"),
    }


def test_install_sql_prints_the_mysql_script_for_the_mysql_client(
    make_project: MakeProject, mysql_url: str, mysql_server_url: str
) -> None:
    """On a MySQL project `install --sql` prints the MySQL script (DELIMITER lines for the client)
    and touches nothing; piped to the `mariadb` client it installs exactly what a run installs,
    and fenced runs use it."""
    project = make_project(url=mysql_url)
    project.add_revision("0001", None, ["CREATE TABLE t (id int)"], ["DROP TABLE t"])
    script = project.run_cli("install", "--sql").check(0).stdout
    assert "CREATE TABLE IF NOT EXISTS `fencemigrate_agent_fence` (" in script
    assert "DELIMITER //" in script and "@extschema@" not in script
    assert mysql_table_names(mysql_url) == []

    url = make_url(mysql_url)
    client = [
        "mariadb",
        f"--host={url.host}",
        f"--port={url.port}",
        f"--user={url.username}",
        f"--password={url.password}",
        str(url.database),
    ]
    run_command(client, project.path, input=script).check(0)
    by_runner = create_test_database(mysql_server_url)
    try:
        other = make_project(url=by_runner, name="by_runner")
        assert other.run_cli("install").check(0).stdout.strip() == "installed"
        assert _fence_objects(mysql_url) == _fence_objects(by_runner)
    finally:
        drop_test_database(by_runner)
    assert project.run_cli("install").check(0).stdout.strip() == "already installed"
    project.run_cli("upgrade", "head", "--token", "3").check(0)
    assert fence_tokens(mysql_url) == {"db/migrations": 3}


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("upgrade", "head", "--token", "5", "--mode", "transactional"),
            "fencemigrate: usage: --mode transactional is impossible on MySQL/MariaDB: they commit every DDL "
            "statement on their own, so the fence claim cannot share a transaction with the migration; leave "
            "--mode out (pre-check mode is the default there). Nothing was changed",
        ),
        (
            ("resolve", "0001", "--as", "applied"),
            "fencemigrate: usage: resolve needs --token N (or FENCEMIGRATE_TOKEN): settling a dirty revision is "
            "a deliberate write under the lease you hold",
        ),
        (
            ("resolve", "0001", "--token", "5", "--as", "applied"),
            "fencemigrate: usage: 0001 is not dirty: only pre-check mode (MySQL/MariaDB, or --mode precheck on "
            "PostgreSQL) marks revisions dirty, and this database has none (nothing was changed)",
        ),
        (
            ("resolve", "9999", "--token", "5", "--as", "applied"),
            "fencemigrate: usage: Can't locate revision identified by '9999'",
        ),
        (
            ("resolve", "head", "--token", "5", "--as", "applied"),
            "fencemigrate: usage: resolve takes the id of the dirty revision, not 'head'",
        ),
        (("upgrade", "head", "--token", "0"), "fencemigrate: usage: "),
    ],
)
def test_bad_input_changes_nothing(
    make_project: MakeProject, mysql_url: str, args: tuple[str, ...], message: str
) -> None:
    project = make_project(url=mysql_url)
    project.add_revision("0001", None, ["CREATE TABLE t (id int)"], ["DROP TABLE t"])
    result = project.run_cli(*args)
    result.check(2)
    assert result.stderr.splitlines()[-1].startswith(message), result
    assert result.stdout == ""  # nothing written, not even a script's first lines
    assert mysql_table_names(mysql_url) == []


def test_bad_choices_are_usage_errors(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    project.add_revision("0001", None, ["CREATE TABLE t (id int)"], ["DROP TABLE t"])
    for args in (("upgrade", "head", "--mode", "sometimes"), ("resolve", "0001", "--token", "5", "--as", "maybe")):
        result = project.run_cli(*args)
        result.check(2)
        assert "Invalid value for" in result.stderr
    assert mysql_table_names(mysql_url) == []


def test_resolve_of_a_revision_that_is_not_dirty(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    add_half_failing(project)
    project.run_cli("upgrade", "head", "--token", "5").check(1)
    before = snapshot(mysql_url)
    result = project.run_cli("resolve", "0001", "--token", "5", "--as", "applied")
    result.check(2)
    assert result.stderr.splitlines()[-1] == (
        "fencemigrate: usage: 0001 is not dirty on db/migrations (dirty revisions: 0002); nothing was changed"
    )
    assert snapshot(mysql_url) == before


def test_monotonic_guard_on_mysql(make_project: MakeProject, mysql_url: str) -> None:
    """No client can lower a fence token or delete a fence row; raising it is allowed."""
    project = make_project(url=mysql_url)
    project.add_revision("0001", None, ["CREATE TABLE t (id int)"], ["DROP TABLE t"])
    project.run_cli("upgrade", "head", "--token", "7").check(0)
    project.run_cli("lease", "acquire", "--holder", "someone").check(0)  # a lease row, token 8
    import pymysql

    for sql in (
        "UPDATE fencemigrate_agent_fence SET token = 6",
        "DELETE FROM fencemigrate_agent_fence",
        "UPDATE fencemigrate_lease SET token = 0",
        "DELETE FROM fencemigrate_lease",
    ):
        with pytest.raises(pymysql.err.MySQLError, match="monotonic"):
            mysql_rows(mysql_url, sql)
    assert fence_tokens(mysql_url) == {"db/migrations": 8}
    # Above the lease service's last token the lease guard refuses it (test_lease_guard.py); an
    # external fence may be raised, as a claim does.
    with pytest.raises(pymysql.err.MySQLError, match="lease guard: "):
        mysql_rows(mysql_url, "UPDATE fencemigrate_agent_fence SET token = 9")
    project.run_cli("lease", "release", "--holder", "someone").check(0)
    project.run_cli("lease", "detach").check(0)
    mysql_rows(mysql_url, "UPDATE fencemigrate_agent_fence SET token = 9")
    assert fence_tokens(mysql_url) == {"db/migrations": 9}


def test_second_database_on_the_same_server_has_its_own_lock(
    make_project: MakeProject, mysql_url: str, mysql_server_url: str
) -> None:
    """Named locks are server-wide: the lock name includes the database, so two apps do not wait on each other."""
    other = create_test_database(mysql_server_url)
    try:
        first = make_project(url=mysql_url, name="first")
        second = make_project(url=other, name="second")
        for project in (first, second):
            project.add_revision("0001", None, extra_upgrade_code=SLOW_UPGRADE.format(seconds=2, table="slow"))
        running = start(first, "upgrade", "head", "--token", "1")
        wait_for(lambda: lock_holder(mysql_url) is not None)
        second.run_cli("upgrade", "head", "--token", "1", "--wait", "0s").check(0)
        finish(running).check(0)
    finally:
        drop_test_database(other)


def test_fence_advanced_behind_the_named_lock_stops_the_next_revision(
    make_project: MakeProject, mysql_url: str
) -> None:
    """The documented window: a fence advance that bypasses the named lock (a raw UPDATE, here from
    inside revision 0001) does not stop the revision already running, but the next revision's
    check does: 0002 is FENCED before its DDL, and nothing is left dirty."""
    project = make_project(url=mysql_url)
    project.add_revision(
        "0001", None, ["CREATE TABLE one (id int)", "UPDATE fencemigrate_agent_fence SET token = 9"], ["DROP TABLE one"]
    )
    project.add_revision("0002", "0001", ["CREATE TABLE two (id int)"], ["DROP TABLE two"])
    result = project.run_cli("upgrade", "head", "--token", "5", "--holder", "stale")
    assert_fenced(result, token=5, fence=9, granted_only=True)  # raised by hand: nothing written under 9
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert app_tables(mysql_url) == ["alembic_version", "one"]
    assert versions(mysql_url) == ["0001"]
    assert ledger(mysql_url) == {"0001": (5, "stale", "applied")}
    assert json.loads(project.run_cli("state", "--json").check(0).stdout)["dirty"] == []

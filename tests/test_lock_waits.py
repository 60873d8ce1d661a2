"""Waits that block inside the database report progress, are bounded by --wait and can be preempted
(issue 25): a writer paused (SIGSTOP) inside a revision holds the fence (PostgreSQL's fence row,
SQLite's write lock, pre-check mode's named lock); the next writer says within 5 s, then every 5 s,
who holds it (pid, holder, token, since when, what it runs), gives up after --wait with busy (exit 4),
--token included, and with --preempt ends a holder under an older token.

The holder is a real ``fencemigrate upgrade`` process; the waiting writer runs in-process.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from support.background_runs import lock_holder, wait_for
from support.db import libpq_url, query, table_names
from support.fence_rows import fence_token, ledger, ledger_tokens
from support.in_process import run_in_process
from support.project import MakeProject, Project, Result, script_command, start_process
from support.sqlite_rows import make_sqlite_project
from support.sqlite_rows import query as sqlite_query
from support.zygote import Process

from fencemigrate.dialects.sqlite_transactions import sqlite_transactions, waiting_at_begins
from fencemigrate.dialects.waits import LockWait, WaitBound
from fencemigrate.errors import LeaseBusy

WAIT_LINE = re.compile(
    r"^waiting for the fence of db/migrations: held by pid (\d+) \(agent-A, token 5\) since \S+, "
    r"(running: SELECT pg_sleep\(60\)|idle in transaction after: .*); waited \d+s, waiting at most \S+ more$"
)


def sleeping_backend(url: str) -> int | None:
    """The backend pid of the session running the revision's pg_sleep, if one does."""
    rows = query(
        url, "SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(%' AND pid <> pg_backend_pid()"
    )
    return int(rows[0][0]) if rows else None


@contextmanager
def paused_writer(project: Project, url: str, *args: str, token: str | None = "5") -> Iterator[Process]:
    """``fencemigrate upgrade head --token TOKEN --holder agent-A ARGS`` (its revision sleeps: SLOW
    set; no --token when ``token`` is None), stopped (SIGSTOP) once it sleeps inside it; killed at the
    end (its transaction rolls back)."""
    given = [] if token is None else ["--token", token]
    process = start_process(
        [*script_command("fencemigrate"), "upgrade", "head", *given, "--holder", "agent-A", *args],
        project.path,
        {"SLOW": "1"},
    )
    try:
        wait_for(lambda: sleeping_backend(url) is not None or process.poll() is not None, timeout=180)
        assert process.poll() is None, process.communicate()
        os.kill(process.pid, signal.SIGSTOP)
        yield process
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.communicate(timeout=60)


SLEEP_IF_SLOW = "import os\nif os.environ.get('SLOW'):\n    op.execute('SELECT pg_sleep(60)')"


def slow_project(project: Project) -> None:
    """One revision: a table, then (in the paused writer only) a long statement."""
    project.add_revision(
        "a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1", extra_upgrade_code=SLEEP_IF_SLOW
    )


def sqlite_tables(database: Path) -> list[str]:
    """The tables a migration may have created in the SQLite file (not Alembic's, not the fence's)."""
    rows = sqlite_query(database, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [name for (name,) in rows if name != "alembic_version" and not name.startswith(("fencemigrate_", "sqlite_"))]


def wait_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("waiting for ")]


@pytest.mark.serial
def test_a_token_run_behind_a_paused_writer_reports_who_holds_the_fence_and_is_bounded(
    project: Project, pg_url: str
) -> None:
    """Reported within 5 s and every 5 s after (pid, holder, token, since, statement); busy (exit 4)
    after --wait, with --token: the wait no longer lasts as long as the paused writer."""
    slow_project(project)
    with paused_writer(project, pg_url):
        holder = sleeping_backend(pg_url)
        # CONTROL: the claim itself, unsliced, waits in silence for as long as its lock_timeout lets it.
        with psycopg.connect(libpq_url(pg_url)) as plain:
            plain.execute("SET lock_timeout = '3s'")
            started = time.monotonic()
            with pytest.raises(psycopg.errors.LockNotAvailable):
                plain.execute("SELECT fencemigrate.claim('db/migrations', 6)")
            # The server's timer may fire a millisecond before the client's clock says 3 s.
            assert time.monotonic() - started >= 2.9
        started = time.monotonic()
        result = run_in_process(project.path, "upgrade", "head", "--token", "6", "--holder", "agent-B", "--wait", "12s")
        elapsed = time.monotonic() - started
    result.check(4)
    assert 12 <= elapsed < 60, elapsed
    lines = wait_lines(result.stderr)
    assert 2 <= len(lines) <= 3, result.stderr  # at about 1 s, 6 s and 11 s
    for line in lines:
        match = WAIT_LINE.match(line)
        assert match is not None, line
        assert int(match.group(1)) == holder
    assert result.stderr.splitlines()[-1].startswith(
        f"fencemigrate: busy: lease on db/migrations is busy: the fence is held by pid {holder} (agent-A, token 5)"
    ), result.stderr
    assert result.stderr.rstrip().endswith("waited 12s; this is transient, try again later")
    assert table_names(pg_url) == ["alembic_version"]


@pytest.mark.serial
def test_preempt_with_a_token_ends_a_paused_writer_under_an_older_token(project: Project, pg_url: str) -> None:
    """--preempt --token 6 ends agent-A's session (token 5) at its first report: A's transaction rolls
    back completely, and B applies the revision under token 6."""
    slow_project(project)
    with paused_writer(project, pg_url):
        holder = sleeping_backend(pg_url)
        result = run_in_process(
            project.path, "upgrade", "head", "--token", "6", "--holder", "agent-B", "--wait", "30s", "--preempt"
        )
        result.check(0)
        assert sleeping_backend(pg_url) is None
    assert holder not in [row[0] for row in query(pg_url, "SELECT pid FROM pg_stat_activity")]
    assert ledger(pg_url)["a1"].applied_token == 6 and ledger(pg_url)["a1"].holder == "agent-B"
    assert fence_token(pg_url) == 6


@pytest.mark.serial
def test_preempt_leaves_a_newer_writer_alone(project: Project, pg_url: str) -> None:
    """A holder under a newer token is never preempted: --preempt --token 4 waits, then is busy."""
    slow_project(project)
    with paused_writer(project, pg_url):
        holder = sleeping_backend(pg_url)
        result = run_in_process(
            project.path, "upgrade", "head", "--token", "4", "--holder", "agent-B", "--wait", "2s", "--preempt"
        )
        result.check(4)
        assert sleeping_backend(pg_url) == holder


@pytest.mark.serial
def test_a_run_taking_its_lease_reports_the_paused_writer_it_waits_for(project: Project, pg_url: str) -> None:
    """The issue's case: agent-A's lease (1 s) expires while A is paused in its revision; B's grant
    then waits for A's transaction. B says so within 5 s, naming A's pid, holder and token, and is
    busy after --wait; before the change it printed nothing until then."""
    slow_project(project)
    with paused_writer(project, pg_url, "--ttl", "1s", token=None):
        holder = sleeping_backend(pg_url)
        result = run_in_process(project.path, "upgrade", "head", "--holder", "agent-B", "--wait", "8s")
    result.check(4)
    fence_waits = [line for line in wait_lines(result.stderr) if line.startswith("waiting for the fence")]
    assert fence_waits, result.stderr
    assert fence_waits[0].startswith(
        f"waiting for the fence of db/migrations: held by pid {holder} (agent-A, token 1) since "
    ), result.stderr
    assert "a migration under an older token is still in flight" in result.stderr.splitlines()[-1]
    assert f"(held by pid {holder} (agent-A, token 1)" in result.stderr.splitlines()[-1]


def test_a_report_never_shows_the_holders_password(project: Project, pg_url: str) -> None:
    """The holder of the fence, the first claim of the resource and still in flight, runs a statement
    with a password in it: the run waits for it within --wait (registering the resource's lock key
    waited without a bound before), and the report and the busy message show the statement with
    the password withheld."""
    slow_project(project)
    project.run_cli("install").check(0)
    with psycopg.connect(libpq_url(pg_url)) as holder:
        holder.execute("SELECT fencemigrate.claim('db/migrations', 5)")
        pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
        running = threading.Thread(
            target=lambda: holder.execute("SELECT pg_sleep(8) /* ALTER ROLE app PASSWORD 'hunter2' */"), daemon=True
        )
        running.start()
        wait_for(lambda: sleeping_backend(pg_url) == pid, timeout=30)
        result = run_in_process(project.path, "upgrade", "head", "--token", "6", "--wait", "2s")
        running.join(timeout=30)
        holder.rollback()
    result.check(4)
    assert "hunter2" not in result.stderr + result.stdout, result
    assert "ALTER ROLE app PASSWORD '***'" in result.stderr.splitlines()[-1], result


def test_plain_alembic_through_the_fence_aware_env_py_waits_within_fence_wait(tmp_path: Path, pg_url: str) -> None:
    """``alembic -x fence_token=6 -x fence_wait=2s upgrade head`` behind another session's claim:
    reported on stderr (who holds the fence), then busy (exit 4) after 2 s, nothing applied. It
    waited for as long as that session lasted before, silently."""
    root = tmp_path / "fenced"
    root.mkdir()
    subprocess.run([*script_command("fencemigrate"), "init", "migrations"], cwd=root, check=True, capture_output=True)
    project = Project(path=root, url=pg_url, template="fencemigrate")
    project.set_url(pg_url)
    slow_project(project)
    project.run_cli("install").check(0)
    with psycopg.connect(libpq_url(pg_url)) as holder:
        holder.execute("SELECT fencemigrate.register_lock_key('db/migrations')")
        holder.commit()
        holder.execute("SELECT fencemigrate.claim('db/migrations', 5)")
        pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
        result = project.run_alembic("-x", "fence_token=6", "-x", "fence_wait=2s", "upgrade", "head")
        holder.rollback()
    assert result.code == 4, result
    assert f"fencemigrate: waiting for the fence of db/migrations: held by pid {pid}" in result.stderr, result
    assert result.stderr.rstrip().endswith("waited 2s; this is transient, try again later"), result
    assert table_names(pg_url) == ["alembic_version"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [("48h", "at most 24h"), ("forever", "expected a duration such as 30s, 5m or 250ms")],
)
def test_plain_alembic_refuses_a_bad_fence_wait_before_it_writes(
    tmp_path: Path, pg_url: str, value: str, problem: str
) -> None:
    """``-x fence_wait`` beyond 24 h or not a duration: bad usage (exit 2) in the words ``--wait``
    gets, and nothing applied."""
    root = tmp_path / "fenced"
    root.mkdir()
    subprocess.run([*script_command("fencemigrate"), "init", "migrations"], cwd=root, check=True, capture_output=True)
    project = Project(path=root, url=pg_url, template="fencemigrate")
    project.set_url(pg_url)
    slow_project(project)
    project.run_cli("install").check(0)
    result = project.run_alembic("-x", "fence_token=6", "-x", f"fence_wait={value}", "upgrade", "head")
    assert result.code == 2, result
    assert result.stderr.rstrip().splitlines()[-1] == f"fencemigrate: usage: invalid -x fence_wait {value!r}: {problem}"
    assert table_names(pg_url) == ["alembic_version"]


AUTOCOMMIT_THEN_WAIT = """
import os, pathlib, time
if os.environ['ROLE'] == 'A':
    with op.get_context().autocommit_block():
        pathlib.Path(os.environ['A_IN_BLOCK']).touch()
        while not pathlib.Path(os.environ['B_INSIDE']).exists():
            time.sleep(0.05)
else:
    pathlib.Path(os.environ['B_INSIDE']).touch()
    op.execute('SELECT pg_sleep(60)')
"""


@pytest.mark.serial
def test_a_claim_after_an_autocommit_block_waits_in_reported_slices(
    project: Project, pg_url: str, tmp_path: Path
) -> None:
    """A's revision leaves its autocommit_block() while B (token 6) holds the fence in its own revision:
    A's claim in the transaction after the block waits as a first claim does, reported (naming B) and
    busy after --wait (before: in silence, for as long as B's transaction lasted)."""
    project.add_revision("a1", None, (), slug="t1", extra_upgrade_code=AUTOCOMMIT_THEN_WAIT)
    files = {"A_IN_BLOCK": str(tmp_path / "a-in-block"), "B_INSIDE": str(tmp_path / "b-inside")}

    def start(role: str, token: str, *args: str) -> Process:
        return start_process(
            [*script_command("fencemigrate"), "upgrade", "head", "--token", token, "--holder", f"agent-{role}", *args],
            project.path,
            {"ROLE": role, **files},
        )

    writer_a = start("A", "5", "--wait", "4s")
    writer_b = None
    try:
        wait_for(lambda: Path(files["A_IN_BLOCK"]).exists() or writer_a.poll() is not None, timeout=120)
        assert writer_a.poll() is None, writer_a.communicate()
        writer_b = start("B", "6")
        wait_for(lambda: sleeping_backend(pg_url) is not None or writer_b.poll() is not None, timeout=120)
        assert writer_b.poll() is None, writer_b.communicate()
        holder = sleeping_backend(pg_url)
        _, stderr = writer_a.communicate(timeout=60)
    finally:
        for writer in (writer_a, writer_b):
            if writer is not None and writer.poll() is None:
                writer.kill()
                writer.communicate(timeout=60)
    assert writer_a.returncode == 4, stderr
    lines = wait_lines(stderr)
    assert lines and all(f"held by pid {holder} (agent-B, token 6)" in line for line in lines), stderr
    assert stderr.splitlines()[-1].startswith(
        f"fencemigrate: busy: lease on db/migrations is busy: the fence is held by pid {holder} (agent-B, token 6)"
    ), stderr


def per_migration_chain(project: Project) -> None:
    """``a1``, ``b2``, ``c3`` with ``transaction_per_migration=True``; ``a1`` applied under token 5
    (the fence row and its lock key exist)."""
    project.set_env_option("transaction_per_migration", True)
    for rev, down, table in (("a1", None, "t1"), ("b2", "a1", "t2"), ("c3", "b2", "t3")):
        project.add_revision(rev, down, f"CREATE TABLE {table} (id int)", f"DROP TABLE {table}", slug=table)
    project.run_cli("upgrade", "a1", "--token", "5").check(0)


def upgrade_behind(pg_url: str, project: Project, claim_sql: str, release_after_s: float | None, wait: str) -> Result:
    """``upgrade head --token 5 --wait WAIT`` while another session holds what ``claim_sql`` takes,
    committed after ``release_after_s`` (None: rolled back once the run has ended)."""
    with psycopg.connect(libpq_url(pg_url)) as holder:
        holder.execute(claim_sql)
        release = threading.Timer(release_after_s, holder.commit) if release_after_s is not None else None
        if release is not None:
            release.start()
        try:
            return run_in_process(
                project.path, "upgrade", "head", "--token", "5", "--holder", "agent-B", "--wait", wait
            )
        finally:
            if release is not None:
                release.join()
            holder.rollback()


def test_a_transaction_per_migration_claim_waits_for_a_held_fence_in_reported_slices(
    project: Project, pg_url: str
) -> None:
    """transaction_per_migration=True: a step claims and writes its ledger row in one statement when
    no other transaction holds the fence (test_environments counts the claims); when one does, the
    claim waits in reported slices, naming it, then claims and records as usual."""
    per_migration_chain(project)
    result = upgrade_behind(pg_url, project, "SELECT fencemigrate.claim('db/migrations', 5)", 2.5, "30s")
    result.check(0)
    lines = wait_lines(result.stderr)
    assert lines and all(re.search(r"held by pid \d+ ", line) for line in lines), result.stderr
    assert ledger_tokens(pg_url) == {"a1": 5, "b2": 5, "c3": 5}
    assert table_names(pg_url) == ["alembic_version", "t1", "t2", "t3"]


def test_a_stale_per_migration_claim_behind_a_newer_writer_is_fenced_once_it_commits(
    project: Project, pg_url: str
) -> None:
    """A transaction claiming token 6 holds the fence row: the one-statement claim finds it busy and
    the run waits in slices; once token 6 commits, the claim of token 5 is FENCED and nothing of the
    run is written (no table, no version, no ledger row, no APPLY event)."""
    per_migration_chain(project)
    events = query(pg_url, "SELECT count(*) FROM fencemigrate.fence_event WHERE kind = 'APPLY'")
    result = upgrade_behind(pg_url, project, "SELECT fencemigrate.claim('db/migrations', 6)", 2.5, "30s")
    result.check(3)
    assert wait_lines(result.stderr), result.stderr
    assert ledger_tokens(pg_url) == {"a1": 5} and fence_token(pg_url) == 6
    assert table_names(pg_url) == ["alembic_version", "t1"]
    assert query(pg_url, "SELECT count(*) FROM fencemigrate.fence_event WHERE kind = 'APPLY'") == events


@pytest.mark.parametrize(
    "claim_sql",
    [
        "SELECT fencemigrate.claim('db/migrations', 5)",
        "SELECT pg_advisory_xact_lock(1718503789, fencemigrate.resource_key('db/migrations'))",
    ],
    ids=["fence row", "claim lock"],
)
def test_a_per_migration_claim_held_past_wait_is_busy_and_writes_nothing(
    project: Project, pg_url: str, claim_sql: str
) -> None:
    """The fence row, or the claim lock (exclusive, as a grant takes it), held past ``--wait 3s``: busy
    (exit 4) within the bound, the wait reported, nothing written."""
    per_migration_chain(project)
    started = time.monotonic()
    result = upgrade_behind(pg_url, project, claim_sql, None, "3s")
    elapsed = time.monotonic() - started
    result.check(4)
    assert 3 <= elapsed < 20, elapsed
    assert wait_lines(result.stderr), result.stderr
    assert ledger_tokens(pg_url) == {"a1": 5}
    assert table_names(pg_url) == ["alembic_version", "t1"]


# -- SQLite ------------------------------------------------------------------------------------------

HOLD_IF_SLOW = """
import os, pathlib, time
if os.environ.get('SLOW'):
    pathlib.Path(os.environ['INSIDE']).touch()
    time.sleep(60)
"""


@contextmanager
def paused_inside_revision(project: Project, inside: Path) -> Iterator[Process]:
    """``fencemigrate upgrade head --token 5 --holder agent-A``, stopped (SIGSTOP) inside its revision
    once the revision has touched ``inside`` (SQLite: its transaction, and the write lock, open; MySQL:
    the named lock held); killed at the end."""
    process = start_process(
        [*script_command("fencemigrate"), "upgrade", "head", "--token", "5", "--holder", "agent-A"],
        project.path,
        {"SLOW": "1", "INSIDE": str(inside)},
    )
    try:
        wait_for(lambda: inside.exists() or process.poll() is not None, timeout=180)
        assert process.poll() is None, process.communicate()
        os.kill(process.pid, signal.SIGSTOP)
        yield process
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.communicate(timeout=60)


@pytest.mark.serial
def test_a_token_run_on_sqlite_reports_the_write_lock_and_is_bounded_by_wait(tmp_path: Path) -> None:
    """SQLite: B waits for the write lock A's paused transaction holds, says so within 5 s and every
    5 s after, and is busy after --wait (before: silent for the whole 60 s busy timeout). --preempt is
    refused: no process can end another's SQLite transaction."""
    project = make_sqlite_project(tmp_path)
    project.add_revision(
        "a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1", extra_upgrade_code=HOLD_IF_SLOW
    )
    with paused_inside_revision(project, tmp_path / "inside"):
        started = time.monotonic()
        result = run_in_process(project.path, "upgrade", "head", "--token", "6", "--holder", "agent-B", "--wait", "12s")
        elapsed = time.monotonic() - started
        refused = run_in_process(project.path, "upgrade", "head", "--token", "6", "--preempt")
    result.check(4)
    assert 12 <= elapsed < 50, elapsed
    lines = wait_lines(result.stderr)
    assert 2 <= len(lines) <= 3, result.stderr
    assert all(
        re.fullmatch(
            r"waiting for SQLite's write lock of db/migrations: held by another session \(the database does "
            r"not say which\); waited \d+s, waiting at most \d+s more",
            line,
        )
        for line in lines
    ), lines
    assert result.stderr.splitlines()[-1] == (
        "fencemigrate: busy: lease on db/migrations is busy: SQLite's write lock is held by another session "
        "(the database does not say which); waited 12s; this is transient, try again later"
    )
    refused.check(2)
    assert "--preempt is not available on SQLite" in refused.stderr
    assert sqlite_tables(tmp_path / "db.sqlite") == []


class HeardWaits:
    """A :class:`~fencemigrate.dialects.waits.LockProgress` that keeps what it hears."""

    def __init__(self) -> None:
        self.heard: list[LockWait] = []

    def waiting_for_lock(self, wait: LockWait) -> None:
        self.heard.append(wait)


def test_every_begin_of_a_fenced_run_on_sqlite_waits_in_slices(tmp_path: Path) -> None:
    """Not only a run's first transaction: while a fenced run is on (from its mode's choice to its end),
    every BEGIN of a SQLite connection (the next revision's with transaction_per_migration, one after a
    commit behind SQLAlchemy's back) waits for the write lock in reported slices, bounded by --wait
    (before: silent, for the 60 s busy timeout). Outside a run, BEGIN waits as before."""
    database = tmp_path / "db.sqlite"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer: the write lock held
    engine = sa.create_engine(f"sqlite:///{database}", poolclass=sa.NullPool)
    heard = HeardWaits()
    try:
        with sqlite_transactions(), engine.connect() as connection:
            waiting_at_begins("db/migrations", WaitBound(1500, progress=heard))
            try:
                started = time.monotonic()
                with pytest.raises(LeaseBusy) as busy:
                    connection.begin()
                elapsed = time.monotonic() - started
            finally:
                waiting_at_begins("db/migrations", None)
            assert 1.4 <= elapsed < 10, elapsed
            assert str(busy.value) == (
                "lease on db/migrations is busy: SQLite's write lock is held by another session "
                "(the database does not say which); waited 1500ms; this is transient, try again later"
            ), busy.value
            assert [(wait.resource, wait.lock) for wait in heard.heard] == [("db/migrations", "SQLite's write lock")]
            # The connection's own busy timeout is as it was.
            assert connection.connection.dbapi_connection.execute("PRAGMA busy_timeout").fetchone() == (60000,)
        holder.execute("COMMIT")
        with sqlite_transactions(), engine.connect() as connection, connection.begin():
            connection.exec_driver_sql("CREATE TABLE t (id int)")
    finally:
        holder.close()
        engine.dispose()
    assert sqlite_tables(database) == ["t"]


# -- MariaDB: pre-check mode's named lock ------------------------------------------------------------


@pytest.mark.serial
def test_a_precheck_run_reports_who_holds_the_named_lock_and_preempt_ends_an_older_one(
    make_project: MakeProject, mysql_url: str, tmp_path: Path
) -> None:
    """MariaDB: B waits for the named lock of A (paused inside revision a1, marked in flight under
    token 5), names A's connection, holder and token within 5 s, and is busy after --wait. With
    --preempt (token 6) B ends A's session at once; A's revision stays dirty, so B stops DIRTY (exit 5)
    as a grant's --preempt leaves it."""
    project = make_project(url=mysql_url)
    # Its DDL commits the mark 'applying' (agent-A, token 5), then it sleeps: the named lock held.
    project.add_revision("a1", None, "CREATE TABLE t1 (id int PRIMARY KEY)", extra_upgrade_code=HOLD_IF_SLOW)
    inside = tmp_path / "inside"
    with paused_inside_revision(project, inside):
        holder = lock_holder(mysql_url)
        busy = run_in_process(project.path, "upgrade", "head", "--token", "6", "--holder", "agent-B", "--wait", "3s")
        preempting = run_in_process(
            project.path, "upgrade", "head", "--token", "6", "--holder", "agent-B", "--wait", "30s", "--preempt"
        )
        assert lock_holder(mysql_url) is None
    busy.check(4)
    name = f"'fencemigrate:{mysql_url.rsplit('/', 1)[1]}/db/migrations'"
    lines = wait_lines(busy.stderr)
    assert lines and lines[0].startswith(
        f"waiting for the named lock {name} of db/migrations: held by connection {holder} (agent-A, token 5) since "
    ), busy.stderr
    assert busy.stderr.splitlines()[-1].startswith(
        f"fencemigrate: busy: lease on db/migrations is busy: another fencemigrate writer holds the named lock {name} "
        f"(connection {holder} (agent-A, token 5)"
    ), busy.stderr
    preempting.check(5)
    assert "a1" in preempting.stderr

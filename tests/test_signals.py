"""SIGTERM and SIGINT: the run rolls back, releases the lease it took and exits 143 / 130.

Kubernetes stops a pod with SIGTERM (then SIGKILL after the grace period). A run stopped so must
not leave its lease held for its TTL, where the next deploy waits for it with no output. The
control is SIGKILL, which no process can handle: its lease stays held.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from support.db import alembic_versions, query
from support.fence_rows import ledger, stderr_lines, user_tables
from support.mysql_rows import ledger as mysql_ledger
from support.mysql_rows import versions as mysql_versions
from support.mysql_server import mysql_rows
from support.project import MakeProject, Project, script_command, start_process
from support.sqlite_rows import alembic_versions as sqlite_versions
from support.sqlite_rows import ledger as sqlite_ledger
from support.sqlite_rows import make_sqlite_project
from support.sqlite_rows import user_tables as sqlite_user_tables
from support.zygote import Process

# Each test bounds how long a stopped run takes to exit: run alone, not beside other tests.
pytestmark = pytest.mark.serial

EXIT = {signal.SIGTERM: 143, signal.SIGINT: 130}


def start(project: Project, *args: str) -> Process:
    """``fencemigrate -q *args`` in the background: without progress lines, stderr is the outcome alone."""
    return start_process([*script_command("fencemigrate"), "-q", *args], project.path)


def wait_for(condition: Any, process: Process, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def stop(process: Process, signum: int, timeout: float = 20.0) -> tuple[float, str, str]:
    """Send ``signum``; seconds until the process exited, and its output."""
    sent = time.monotonic()
    process.send_signal(signum)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return time.monotonic() - sent, stdout, stderr


def lease_status(project: Project) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(project.run_cli("lease", "status", "--json").check(0).stdout)["lease"]
    return status


def timeline_kinds(project: Project) -> list[tuple[str, str]]:
    events = json.loads(project.run_cli("timeline", "--json").check(0).stdout)["events"]
    return [(event["kind"], event["holder"]) for event in events]


def interrupted_line(signum: int) -> str:
    name = signal.Signals(signum).name
    return (
        f"fencemigrate: interrupted: stopped by {name}: the transaction in flight was rolled back and the "
        "lease this run took (if any) released; what committed before the signal stays: "
        "run `fencemigrate state` before you go on"
    )


def sleeping_in_pg(url: str) -> bool:
    return bool(
        query(
            url,
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND state = 'active' AND query LIKE 'SELECT pg_sleep(%'",
        )[0][0]
    )


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_signal_inside_the_ddl_rolls_back_and_releases_the_lease(
    project: Project, pg_url: str, signum: int, as_json: bool
) -> None:
    """A run stopped while its revision's DDL runs (pg_sleep on the server) exits 143 / 130 at
    once, with one line (or one JSON object); nothing of the revision is applied, the lease is
    free (a grant with --wait 0 succeeds) and the timeline shows the run's RELEASE."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--holder", "setup").check(0)
    project.add_revision("b2", "a1", ["CREATE TABLE t2 (id int)", "SELECT pg_sleep(30)"], "DROP TABLE t2", slug="t2")
    before = (alembic_versions(pg_url), ledger(pg_url), user_tables(pg_url))

    runner = start(project, "upgrade", "head", "--holder", "runner", *(("--json",) if as_json else ()))
    wait_for(lambda: sleeping_in_pg(pg_url), runner, "the migration never reached pg_sleep")
    took, stdout, stderr = stop(runner, signum)

    assert runner.returncode == EXIT[signum], (stdout, stderr)
    assert took < 10, took
    assert "Traceback" not in stderr, stderr
    if as_json:
        payload = json.loads(stdout)
        assert payload["status"] == "interrupted" and payload["signal"] == signal.Signals(signum).name, payload
        assert stderr_lines(stderr) == [], stderr
    else:
        assert stdout == ""
        assert stderr_lines(stderr) == [interrupted_line(signum)], stderr
    assert (alembic_versions(pg_url), ledger(pg_url), user_tables(pg_url)) == before
    assert not sleeping_in_pg(pg_url)
    assert lease_status(project)["holder"] is None
    assert timeline_kinds(project)[-2:] == [("GRANT", "runner"), ("RELEASE", "runner")]
    project.run_cli("lease", "acquire", "--holder", "next", "--wait", "0").check(0)


def test_sigkill_leaves_the_lease_held(project: Project, pg_url: str) -> None:
    """The control: a run killed with SIGKILL cannot release its lease; it stays held for its TTL."""
    project.add_revision("b2", None, ["CREATE TABLE t2 (id int)", "SELECT pg_sleep(30)"], "DROP TABLE t2", slug="t2")
    runner = start(project, "upgrade", "head", "--holder", "runner", "--ttl", "5m")
    wait_for(lambda: sleeping_in_pg(pg_url), runner, "the migration never reached pg_sleep")
    stop(runner, signal.SIGKILL)

    assert runner.returncode == -signal.SIGKILL
    assert lease_status(project)["holder"] == "runner"
    busy = project.run_cli("lease", "acquire", "--holder", "next", "--wait", "0").check(4)
    assert "lease on db/migrations is busy" in busy.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_run_waiting_for_the_lease_stops_at_once(project: Project, pg_url: str, signum: int) -> None:
    """A run queued behind another holder (waiting up to 10 minutes) exits 143 / 130 within a
    second of the signal; the other holder's lease is untouched and nothing is applied."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("lease", "acquire", "--holder", "other", "--ttl", "5m").check(0)
    runner = start(project, "upgrade", "head", "--holder", "runner")
    time.sleep(3)  # connected and polling for the lease
    assert runner.poll() is None, runner.communicate()
    took, stdout, stderr = stop(runner, signum)

    assert runner.returncode == EXIT[signum], (stdout, stderr)
    assert took < 3, took
    assert stderr_lines(stderr) == [interrupted_line(signum)], stderr
    assert lease_status(project)["holder"] == "other"
    assert list(user_tables(pg_url)) == ["alembic_version"]  # created, empty, by the other holder's grant
    assert alembic_versions(pg_url) == [] and ledger(pg_url) == {}
    assert ("GRANT", "runner") not in timeline_kinds(project)


# -- SQLite ------------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sqlite_a_signal_inside_the_migration_rolls_back_and_releases(tmp_path: Path, signum: int) -> None:
    """On SQLite too: stopped inside a revision (after its DDL), the run rolls back its one
    transaction, releases the lease and exits 143 / 130."""
    project = make_sqlite_project(tmp_path)
    database = Path(project.url.removeprefix("sqlite:///"))
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--holder", "setup").check(0)
    inside = tmp_path / "inside"
    project.add_revision(
        "b2",
        "a1",
        "CREATE TABLE t2 (id int)",
        "DROP TABLE t2",
        slug="t2",
        extra_upgrade_code=f"""
        import pathlib, time
        pathlib.Path({str(inside)!r}).touch()
        time.sleep(30)
    """,
    )
    before = (sqlite_versions(database), sqlite_ledger(database), sqlite_user_tables(database))

    runner = start(project, "upgrade", "head", "--holder", "runner")
    wait_for(inside.exists, runner, "the migration never reached its sleep")
    took, stdout, stderr = stop(runner, signum)

    assert runner.returncode == EXIT[signum], (stdout, stderr)
    assert took < 10, took
    assert stderr_lines(stderr) == [interrupted_line(signum)], stderr
    assert (sqlite_versions(database), sqlite_ledger(database), sqlite_user_tables(database)) == before
    assert lease_status(project)["holder"] is None
    assert timeline_kinds(project)[-2:] == [("GRANT", "runner"), ("RELEASE", "runner")]
    project.run_cli("lease", "acquire", "--holder", "next", "--wait", "0").check(0)


def test_sqlite_sigkill_leaves_the_lease_held(tmp_path: Path) -> None:
    """The control on SQLite: after SIGKILL the lease stays held."""
    project = make_sqlite_project(tmp_path)
    inside = tmp_path / "inside"
    project.add_revision(
        "b2",
        None,
        "CREATE TABLE t2 (id int)",
        "DROP TABLE t2",
        slug="t2",
        extra_upgrade_code=f"""
        import pathlib, time
        pathlib.Path({str(inside)!r}).touch()
        time.sleep(30)
    """,
    )
    runner = start(project, "upgrade", "head", "--holder", "runner", "--ttl", "5m")
    wait_for(inside.exists, runner, "the migration never reached its sleep")
    stop(runner, signal.SIGKILL)

    assert lease_status(project)["holder"] == "runner"
    project.run_cli("lease", "acquire", "--holder", "next", "--wait", "0").check(4)


def test_sqlite_a_run_waiting_for_the_lease_stops_at_once(tmp_path: Path) -> None:
    """On SQLite, a run queued behind another holder's lease exits 143 within a second of SIGTERM."""
    project = make_sqlite_project(tmp_path)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("lease", "acquire", "--holder", "other", "--ttl", "5m").check(0)
    runner = start(project, "upgrade", "head", "--holder", "runner")
    time.sleep(3)  # connected and polling for the lease
    assert runner.poll() is None, runner.communicate()
    took, stdout, stderr = stop(runner, signal.SIGTERM)

    assert runner.returncode == 143, (stdout, stderr)
    assert took < 3, took
    assert stderr_lines(stderr) == [interrupted_line(signal.SIGTERM)], stderr
    assert lease_status(project)["holder"] == "other"


# -- MariaDB (pre-check mode) ----------------------------------------------------------------------


def sleeping_in_mysql(url: str) -> bool:
    rows = mysql_rows(
        url,
        "SELECT count(*) FROM information_schema.processlist "
        "WHERE id <> connection_id() AND info LIKE 'SELECT SLEEP(%'",
    )
    return bool(rows[0][0])


def sessions_in_mysql(url: str) -> int:
    """Sessions on the test's database other than this query's own."""
    rows = mysql_rows(
        url, "SELECT count(*) FROM information_schema.processlist WHERE id <> connection_id() AND db = database()"
    )
    return int(rows[0][0])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_mariadb_a_signal_inside_a_revision_releases_the_lease_and_leaves_it_dirty(
    make_project: MakeProject, mysql_url: str, signum: int
) -> None:
    """On MariaDB the revision's DDL commits by itself (pre-check mode), so a run stopped inside the
    revision cannot roll it back: it exits 143 / 130 with one line, its statement on the server is
    cancelled, its lease is released, and the revision is reported dirty (what pre-check mode says
    of a revision that started and never finished): the next fenced write is refused (exit 5)."""
    project = make_project(url=mysql_url)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--holder", "setup").check(0)
    project.add_revision("b2", "a1", ["CREATE TABLE t2 (id int)", "SELECT SLEEP(30)"], "DROP TABLE t2", slug="t2")

    runner = start(project, "upgrade", "head", "--holder", "runner")
    wait_for(lambda: sleeping_in_mysql(mysql_url), runner, "the migration never reached SLEEP")
    took, stdout, stderr = stop(runner, signum)

    assert runner.returncode == EXIT[signum], (stdout, stderr)
    assert took < 10, took
    assert "Traceback" not in stderr, stderr
    assert stderr_lines(stderr) == [interrupted_line(signum)], stderr
    assert not sleeping_in_mysql(mysql_url)
    assert lease_status(project)["holder"] is None
    assert timeline_kinds(project)[-2:] == [("GRANT", "runner"), ("RELEASE", "runner")]
    assert mysql_versions(mysql_url) == ["a1"]
    assert mysql_ledger(mysql_url)["b2"][2] == "applying"  # dirty: started, never finished
    refused = project.run_cli("upgrade", "head", "--holder", "next", "--wait", "0")
    assert refused.code == 5, str(refused)


def test_mariadb_a_run_waiting_for_the_lease_stops_at_once(make_project: MakeProject, mysql_url: str) -> None:
    """On MariaDB, a run queued behind another holder's lease exits 143 within a few seconds of
    SIGTERM; the other holder keeps its lease and nothing is applied."""
    project = make_project(url=mysql_url)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("lease", "acquire", "--holder", "other", "--ttl", "5m").check(0)
    runner = start(project, "upgrade", "head", "--holder", "runner")
    wait_for(lambda: sessions_in_mysql(mysql_url) > 0, runner, "the run never connected")
    time.sleep(1)  # polling for the lease
    took, stdout, stderr = stop(runner, signal.SIGTERM)

    assert runner.returncode == 143, (stdout, stderr)
    assert took < 3, took
    assert stderr_lines(stderr) == [interrupted_line(signal.SIGTERM)], stderr
    assert lease_status(project)["holder"] == "other"
    assert mysql_versions(mysql_url) == [] and mysql_ledger(mysql_url) == {}


# -- SQLite: waiting for another writer's lock (its busy handler) ----------------------------------


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has the file ``path`` open."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(Path(os.readlink(fd)) == path for fd in fds.iterdir())
    except OSError:  # the process is exiting (or a descriptor closed while we looked)
        return False


def test_sqlite_a_run_waiting_for_the_database_lock_stops_at_once(tmp_path: Path) -> None:
    """A run whose grant waits in SQLite's busy handler (another connection holds the write lock)
    exits 143 within a few seconds of SIGTERM, with one line, having written nothing."""
    project = make_sqlite_project(tmp_path)
    database = Path(project.url.removeprefix("sqlite:///"))
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("install").check(0)
    before = (sqlite_versions(database), sqlite_ledger(database), sqlite_user_tables(database))
    with closing(sqlite3.connect(database, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held until the end of the block
        runner = start(project, "upgrade", "head", "--holder", "runner", "--wait", "2m")
        wait_for(lambda: has_open(runner.pid, database), runner, "the run never opened the database")
        time.sleep(1)  # waiting for the lock
        took, stdout, stderr = stop(runner, signal.SIGTERM)
        holder.execute("ROLLBACK")

    assert runner.returncode == 143, (stdout, stderr)
    assert took < 5, took
    assert stderr_lines(stderr) == [interrupted_line(signal.SIGTERM)], stderr
    assert (sqlite_versions(database), sqlite_ledger(database), sqlite_user_tables(database)) == before

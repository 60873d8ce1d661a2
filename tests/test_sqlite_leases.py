"""The built-in lease service and a run's own lease on SQLite, the embedded default.

The SQLite twin of test_leases.py: real SQLite files, real ``alembic init`` projects, every check
through the ``fencemigrate`` command line and read back from the file with the ``sqlite3`` module.
SQLite has no row locks: a grant waits for the database's single write lock (``BEGIN IMMEDIATE``),
at most ``--wait``; ``--preempt`` is refused; a run renews its lease inside its own migration
transaction, which holds that lock.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import time
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.fence_rows import assert_fenced, stderr_lines
from support.paused import paused_holder, renewal_script
from support.project import Project, Result, run_command, script_command, start_process
from support.sqlite_rows import (
    EVENTS,
    PREFIX,
    alembic_versions,
    fence_installed,
    fence_tokens,
    ledger,
    make_sqlite_project,
    query,
    snapshot,
    table_names,
    user_tables,
)
from support.zygote import Process

LOST = "LEASE LOST: you no longer own db/migrations"
LEASE = f"{PREFIX}lease"
SQLITE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")  # strftime('%Y-%m-%dT%H:%M:%fZ')
PREEMPT_MESSAGE = (
    "--preempt is not available on SQLite: a grant cannot cancel another process's SQLite transaction; "
    "wait for the migration in flight with --wait instead (nothing was changed)"
)
PREEMPT_REFUSED = f"fencemigrate: usage: {PREEMPT_MESSAGE}"
WRITER_IN_FLIGHT = (
    "fencemigrate: busy: lease on db/migrations is busy: another writer holds the SQLite database "
    "(a migration in flight, or another grant); wait for it with a longer --wait (--preempt is not "
    "available on SQLite); this is transient, try again later"
)
WAITING_FOR_THE_WRITE_LOCK = (
    "waiting for SQLite's write lock of db/migrations: held by another session (the database does not say which); "
)


# -- helpers -----------------------------------------------------------------------------------


def database(project: Project) -> Path:
    """The SQLite file a project points at."""
    return Path(project.url.removeprefix("sqlite:///"))


def acquire(project: Project, holder: str, *args: str) -> Result:
    return project.run_cli("lease", "acquire", "--holder", holder, *args)


def granted_token(result: Result) -> int:
    return int(json.loads(result.check(0).stdout)["lease"]["token"])


def lease_row(db: Path) -> tuple[Any, ...] | None:
    rows = query(db, f"SELECT holder, token, ttl_ms FROM {LEASE} WHERE resource = 'db/migrations'")
    return rows[0] if rows else None


def events(db: Path) -> list[tuple[Any, ...]]:
    """``(kind, holder, token, revision)`` of every event, in the order they were written."""
    if not fence_installed(db):
        return []
    return query(db, f"SELECT kind, holder, token, revision FROM {EVENTS} ORDER BY id")


def kinds(db: Path) -> list[str]:
    return [str(kind) for kind, *_ in events(db)]


def lease_status(project: Project) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(project.run_cli("lease", "status", "--json").check(0).stdout)["lease"]
    return status


def wait_until_expired(project: Project, timeout: float = 20.0) -> None:
    """Poll `lease status` until the DATABASE says the lease has expired (no client-side time maths)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lease_status(project)["expired"]:
            return
        time.sleep(0.1)
    raise AssertionError("the lease did not expire by the database's clock")


def add_table(project: Project, rev: str, down: str | None, table: str, *extra_sql: str, code: str = "") -> None:
    project.add_revision(
        rev,
        down,
        [f"CREATE TABLE {table} (id int)", *extra_sql],
        f"DROP TABLE {table}",
        slug=table,
        extra_upgrade_code=code,
    )


def add_held_open_revision(project: Project, inside: Path, go_on: Path) -> None:
    """Revision a1 (table t1), whose run touches ``inside`` once its DDL is in, then keeps its
    transaction, and SQLite's write lock, open until ``go_on`` exists (60 s at most)."""
    add_table(
        project,
        "a1",
        None,
        "t1",
        code=f"""
        import pathlib, time
        pathlib.Path({str(inside)!r}).touch()
        deadline = time.monotonic() + 60
        while not pathlib.Path({str(go_on)!r}).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    """,
    )


def chain(project: Project, count: int, code: str = "") -> None:
    """Revisions r01..rNN, each creating table tNN (and running ``code`` after it)."""
    for number in range(1, count + 1):
        add_table(project, f"r{number:02d}", f"r{number - 1:02d}" if number > 1 else None, f"t{number:02d}", code=code)


def start(project: Project, *args: str) -> Process:
    return start_process([*script_command("fencemigrate"), *args], project.path)


def all_at_once(project: Project, argv: list[list[str]]) -> list[tuple[int, str]]:
    processes = [start_process(args, project.path) for args in argv]
    results = []
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        results.append((process.returncode, stderr))
    return results


def wait_for_file(path: Path, process: Process, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# -- the four commands ---------------------------------------------------------------------------


def test_acquire_renew_release_and_status(tmp_path: Path) -> None:
    """As on PostgreSQL: a grant issues the next token with a fresh read of the state; another
    holder is busy (exit 4); renew or release by someone who does not hold it is LOST (exit 3);
    the holder renews and releases; a second release is LOST. Same messages, same events."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_table(project, "a1", None, "t1")
    project.run_cli("upgrade", "head", "--token", "7", "--holder", "setup").check(0)

    payload = json.loads(acquire(project, "agent-A", "--ttl", "5m", "--json").check(0).stdout)
    assert payload["lease"]["holder"] == "agent-A"
    assert payload["lease"]["token"] == 8  # seeded from the fence, which token 7 reached
    assert payload["lease"]["ttl"] == "5m"
    assert payload["state"]["heads"] == ["a1"]
    assert [(row["revision"], row["applied_token"]) for row in payload["state"]["ledger"]] == [("a1", 7)]
    assert fence_tokens(db) == {"db/migrations": 8}  # fenced on grant, before agent-A writes anything

    busy = acquire(project, "agent-B").check(4)
    assert stderr_lines(busy.stderr) == [
        "fencemigrate: busy: lease on db/migrations is busy: held by agent-A (token 8) until "
        f"{payload['lease']['expires_at']}; this is transient, try again later"
    ]
    renew = project.run_cli("lease", "renew", "--holder", "agent-B").check(3)
    assert stderr_lines(renew.stderr)[0] == f"fencemigrate: lost: {LOST} (it has been granted to agent-A with token 8)."
    project.run_cli("lease", "release", "--holder", "agent-B", "--token", "8").check(3)

    renewed = json.loads(
        project.run_cli("lease", "renew", "--holder", "agent-A", "--token", "8", "--ttl", "2m", "--json")
        .check(0)
        .stdout
    )
    assert (renewed["lease"]["token"], renewed["lease"]["ttl"]) == (8, "2m")
    assert renewed["lease"]["renewed_after_expiry"] is False
    stale = project.run_cli("lease", "renew", "--holder", "agent-A", "--token", "7").check(3)
    assert "your current grant has token 8, not 7" in stale.stderr

    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    assert lease_row(db) == (None, 8, None)
    again = project.run_cli("lease", "release", "--holder", "agent-A").check(3)
    assert "(the lease is not held)" in again.stderr
    status = project.run_cli("lease", "status").check(0)
    assert status.stdout.splitlines() == ["db/migrations: free", "  last token issued: 8; fence token: 8"]
    assert [row[:3] for row in events(db)] == [
        ("APPLY", "setup", 7),
        ("GRANT", "agent-A", 8),
        ("LOST", "agent-B", None),
        ("LOST", "agent-B", 8),
        ("RENEW", "agent-A", 8),
        ("LOST", "agent-A", 7),
        ("RELEASE", "agent-A", 8),
        ("LOST", "agent-A", None),
    ]


def test_the_first_grant_installs_the_fence_schema_and_status_reads_a_fresh_file(tmp_path: Path) -> None:
    """`lease status` on a file nobody has fenced yet: free, nothing issued; the first grant is token 1."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    status = lease_status(project)
    assert (status["holder"], status["token"], status["fence_token"], status["expired"]) == (None, 0, None, False)
    assert granted_token(acquire(project, "agent-A", "--json")) == 1
    assert fence_tokens(db) == {"db/migrations": 1}
    assert lease_row(db) == ("agent-A", 1, 60000)


# -- fencing on grant, expiry, the token counter ------------------------------------------------------


def test_grant_fences_the_old_holder_before_the_new_one_writes(tmp_path: Path) -> None:
    """agent-A's lease expires (by SQLite's clock); agent-B's grant alone, before B writes anything,
    makes A's next write FENCED, and nothing changes. Control: plain alembic lets A's write through."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_table(project, "a1", None, "t1")
    token_a = granted_token(acquire(project, "agent-A", "--ttl", "1s", "--json"))
    project.run_cli("upgrade", "a1", "--token", str(token_a), "--holder", "agent-A").check(0)
    wait_until_expired(project)

    token_b = granted_token(acquire(project, "agent-B", "--json"))
    assert token_b == token_a + 1
    assert fence_tokens(db) == {"db/migrations": token_b}

    add_table(project, "b2", "a1", "t2")
    before = snapshot(db)
    assert_fenced(
        project.run_cli("upgrade", "head", "--token", str(token_a), "--holder", "agent-A"),
        token_a,
        token_b,
        granted_only=True,
    )
    assert snapshot(db) == before

    assert events(db) == [
        ("GRANT", "agent-A", token_a, None),
        ("APPLY", "agent-A", token_a, "a1"),
        ("EXPIRE", "agent-A", token_a, None),
        ("GRANT", "agent-B", token_b, None),
        ("FENCED", "agent-A", token_a, "head"),
    ]
    # Control: without the fence, agent-A's stale write goes straight in.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(db) == ["b2"]


def test_expiry_is_judged_by_sqlite_s_clock_and_the_timeline_sorts_the_expiry(tmp_path: Path) -> None:
    """A 200 ms lease: `lease status` reports it live, then expired, as SQLite's clock says. Its
    holder still writes (nobody else has been granted it); the next grant writes the EXPIRE after
    that APPLY, dated when the lease ran out, before it. Every time in the event log is in the one
    form of SQLite's clock, so the log sorts by time, and `timeline` tells what happened in order."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_table(project, "a1", None, "t1")
    token_a = granted_token(acquire(project, "agent-A", "--ttl", "5m", "--json"))
    assert lease_status(project)["expired"] is False
    renewed = project.run_cli("lease", "renew", "--holder", "agent-A", "--ttl", "200ms", "--json").check(0)
    ran_out_at = json.loads(renewed.stdout)["lease"]["expires_at"]
    wait_until_expired(project)
    assert lease_status(project)["holder"] == "agent-A"  # expired, but nobody has been granted it
    project.run_cli("upgrade", "head", "--token", str(token_a), "--holder", "agent-A").check(0)

    granted = json.loads(acquire(project, "agent-B", "--json").check(0).stdout)["lease"]
    assert (granted["previous_holder"], granted["token"]) == ("agent-A", token_a + 1)
    assert lease_row(db) == ("agent-B", token_a + 1, 60000)

    stored = query(db, f"SELECT kind, at FROM {EVENTS} ORDER BY id")
    assert [kind for kind, _ in stored] == ["GRANT", "RENEW", "APPLY", "EXPIRE", "GRANT"]
    assert all(SQLITE_TIME.match(at) for _, at in stored), stored
    by_text = [kind for (kind,) in query(db, f"SELECT kind FROM {EVENTS} ORDER BY at, id")]
    assert by_text == ["GRANT", "RENEW", "EXPIRE", "APPLY", "GRANT"]
    times = query(db, f"SELECT granted_at, expires_at FROM {LEASE}")[0]
    assert all(SQLITE_TIME.match(at) for at in times), times

    timeline = json.loads(project.run_cli("timeline", "--json").check(0).stdout)["events"]
    assert [(event["kind"], event["holder"]) for event in timeline] == [
        ("GRANT", "agent-A"),
        ("RENEW", "agent-A"),
        ("EXPIRE", "agent-A"),
        ("APPLY", "agent-A"),
        ("GRANT", "agent-B"),
    ]
    moments = [datetime.fromisoformat(event["at"]) for event in timeline]
    assert moments == sorted(moments)  # oldest first
    assert timeline[2]["at"] == ran_out_at  # the EXPIRE is dated when the 200 ms lease ran out


def test_a_grant_by_a_clock_years_ahead_of_the_event_log_is_refused(tmp_path: Path) -> None:
    """SQLite's clock is the clock of whichever machine writes the file. A client whose clock runs
    1000 days ahead of the newest event in the fence event log is refused a grant (exit 1, one
    line, the file unchanged), instead of taking a lease that keeps every other client busy until
    then. An honest client is still granted the lease, and a client a few hours ahead is too."""
    faketime = shutil.which("faketime")
    assert faketime, "faketime (Debian package faketime) is needed: bash .ci/test installs it"
    project = make_sqlite_project(tmp_path)
    db = database(project)
    acquire(project, "agent-A", "--ttl", "1s").check(0)
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    before, logged = snapshot(db), events(db)
    newest = query(db, f"SELECT max(at) FROM {EVENTS}")[0][0]

    ahead = run_command(
        [faketime, "-f", "+1000d", *script_command("fencemigrate"), "lease", "acquire", "--holder", "agent-fast"],
        project.path,
    )
    ahead.check(1)
    lines = stderr_lines(ahead.stderr)
    assert len(lines) == 1 and lines[0].startswith("fencemigrate: error: grant refused: SQLite's clock (")
    assert lines[0].endswith(
        f"is 1000 days ahead of the newest event in the fence event log ({newest}): a lease granted by "
        "it would look live to every other client until then. Fix this machine's clock; nothing was changed"
    )
    assert (snapshot(db), events(db)) == (before, logged)

    acquire(project, "agent-B").check(0)
    project.run_cli("lease", "release", "--holder", "agent-B").check(0)
    hours = run_command(
        [faketime, "-f", "+3h", *script_command("fencemigrate"), "lease", "acquire", "--holder", "agent-C"],
        project.path,
    )
    hours.check(0)
    assert lease_row(db) == ("agent-C", 3, 60000)


def test_a_lease_granted_by_a_clock_years_ahead_is_implausible_and_treated_as_expired(tmp_path: Path) -> None:
    """A client whose clock runs 20 years ahead takes a 1-minute lease on a fresh file (no event to
    judge its clock by). Granted further in the future than its TTL by this machine's clock, the
    lease is implausible: `lease status` and `state` say so and count it as expired, the next honest
    grant takes it over (not "busy until 2046") and the timeline tells why; the fence keeps safety:
    the fast client's token is FENCED."""
    faketime = shutil.which("faketime")
    assert faketime, "faketime (Debian package faketime) is needed: bash .ci/test installs it"
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_table(project, "a1", None, "t1")
    fast = run_command(
        [
            faketime,
            "-f",
            "+7300d",
            *script_command("fencemigrate"),
            "lease",
            "acquire",
            "--holder",
            "agent-fast",
            "--ttl",
            "1m",
            "--json",
        ],
        project.path,
    )
    assert granted_token(fast) == 1
    granted_at = lease_status(project)["granted_at"]
    assert granted_at.startswith("204"), granted_at

    status = lease_status(project)
    assert (status["holder"], status["expired"]) == ("agent-fast", True)  # before: live until 2046
    assert status["implausible"] is True
    text = project.run_cli("lease", "status").check(0).stdout
    assert "  implausible: granted at " + granted_at + ", further in the future than its TTL" in text, text
    state = json.loads(project.run_cli("state", "--json").check(0).stdout)
    assert [(row["resource"], row["holder"], row["token"], row["ttl_ms"]) for row in state["implausible_leases"]] == [
        ("db/migrations", "agent-fast", 1, 60000)
    ]
    warning = [line for line in project.run_cli("state").check(0).stdout.splitlines() if line.startswith("WARNING")]
    assert len(warning) == 1 and "held by agent-fast, token 1" in warning[0], warning
    assert warning[0].endswith("it is implausible and treated as expired (the next grant takes it over)")

    granted = json.loads(acquire(project, "agent-B", "--json").check(0).stdout)["lease"]
    assert (granted["holder"], granted["token"], granted["previous_holder"]) == ("agent-B", 2, "agent-fast")
    assert lease_row(db) == ("agent-B", 2, 60000)
    timeline = json.loads(project.run_cli("timeline", "--json").check(0).stdout)["events"]
    expire = [event for event in timeline if event["kind"] == "EXPIRE"]
    assert len(expire) == 1 and expire[0]["holder"] == "agent-fast" and expire[0]["detail"]["implausible"] is True
    assert datetime.fromisoformat(expire[0]["at"]).year < 2040  # logged when it was taken over, not in 2046
    lines = project.run_cli("timeline").check(0).stdout.splitlines()
    assert any(
        "EXPIRE   db/migrations (holder agent-fast token=1): granted at " in line
        and line.endswith("further in the future than its TTL (a clock ahead): implausible, treated as expired")
        for line in lines
    ), lines
    assert json.loads(project.run_cli("state", "--json").check(0).stdout)["implausible_leases"] == []

    fenced = run_command(
        [
            faketime,
            "-f",
            "+7300d",
            *script_command("fencemigrate"),
            "upgrade",
            "head",
            "--token",
            "1",
            "--holder",
            "agent-fast",
        ],
        project.path,
    )
    assert fenced.code == 3, fenced
    assert "t1" not in user_tables(db)


def test_token_counter_survives_reopening_the_file_and_cannot_go_down(tmp_path: Path) -> None:
    """Tokens keep going up across processes that close and reopen the file, and a copy of the
    file; the monotonic guard refuses lowering, deleting or replacing the counter from any client."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    tokens = []
    for holder in ("a", "b", "c"):
        tokens.append(granted_token(acquire(project, holder, "--json")))
        project.run_cli("lease", "release", "--holder", holder).check(0)
    with closing(sqlite3.connect(db)) as connection:  # opened, checked, closed by another client
        assert connection.execute(f"SELECT token FROM {LEASE}").fetchall() == [(3,)]
    tokens.append(granted_token(acquire(project, "d", "--json")))
    assert tokens == [1, 2, 3, 4]

    for sql in (
        f"UPDATE {LEASE} SET token = 1",
        f"DELETE FROM {LEASE}",
        f"INSERT OR REPLACE INTO {LEASE} (resource, token) VALUES ('db/migrations', 1)",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="monotonic"):
            query(db, sql)
    assert lease_row(db) == ("d", 4, 60000)


# -- waiting: bounded by --wait; --preempt refused -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["lease", "acquire", "--holder", "agent-B", "--preempt"], id="lease-acquire"),
        pytest.param(
            ["lease", "acquire", "--holder", "agent-B", "--preempt", "--wait", "5s", "--json"], id="lease-acquire-json"
        ),
        pytest.param(["upgrade", "head", "--holder", "agent-B", "--preempt"], id="upgrade"),
    ],
)
def test_preempt_is_refused_on_sqlite_and_nothing_changes(tmp_path: Path, args: list[str]) -> None:
    """Another process's SQLite transaction cannot be cancelled: --preempt is a usage error (exit 2)
    on a fenced file and on a fresh one, which is left without a fence schema."""
    fresh = make_sqlite_project(tmp_path, "fresh", "fresh.sqlite")
    add_table(fresh, "a1", None, "t1")
    result = fresh.run_cli(*args).check(2)
    if "--json" in args:
        assert json.loads(result.stdout) == {"status": "usage", "message": PREEMPT_MESSAGE}
    else:
        assert stderr_lines(result.stderr) == [PREEMPT_REFUSED]
    assert table_names(database(fresh)) == []

    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_table(project, "a1", None, "t1")
    add_table(project, "b2", "a1", "t2")
    project.run_cli("upgrade", "a1", "--token", "1", "--holder", "agent-A").check(0)
    acquire(project, "agent-A", "--ttl", "1s").check(0)
    before, logged = snapshot(db), events(db)
    project.run_cli(*args).check(2)
    assert (snapshot(db), events(db)) == (before, logged)


def test_a_grant_waits_at_most_wait_for_a_migration_in_flight(tmp_path: Path) -> None:
    """While agent-A's run migrates (its transaction holds SQLite's write lock), agent-B's grant
    waits at most --wait and answers busy (exit 4), changing nothing; A's run then finishes."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    inside, go_on = tmp_path / "inside", tmp_path / "go-on"
    add_held_open_revision(project, inside, go_on)
    runner = start(project, "upgrade", "head", "--holder", "agent-A")
    try:
        wait_for_file(inside, runner)
        busy = acquire(project, "agent-B", "--wait", "300ms").check(4)
        assert stderr_lines(busy.stderr) == [WRITER_IN_FLIGHT]
        busy_json = json.loads(acquire(project, "agent-B", "--json").check(4).stdout)
        assert (busy_json["status"], busy_json["holder"]) == ("busy", None)
        go_on.touch()
        _, stderr = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 0, stderr
    assert kinds(db) == ["GRANT", "APPLY", "RELEASE"]  # nothing from agent-B
    assert lease_row(db) == (None, 1, None)
    assert ledger(db) == {"a1": (1, "agent-A", "upgrade")}


def test_a_holder_paused_inside_its_renewal_blocks_a_grant_no_longer_than_wait(tmp_path: Path) -> None:
    """agent-A's renewal is stopped with SIGSTOP inside its transaction (SQLite's write lock held)
    after A's lease has expired: a grant with --wait 2s answers busy (exit 4) instead of waiting
    for it; --preempt is refused; nothing changed."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    acquire(project, "agent-A", "--ttl", "200ms").check(0)
    wait_until_expired(project)
    with paused_holder(renewal_script(project.url, "agent-A", "SELECT 0")):
        busy = project.run_cli("lease", "acquire", "--holder", "agent-B", "--wait", "2s", timeout=30).check(4)
        *waiting, last = stderr_lines(busy.stderr)
        assert last == WRITER_IN_FLIGHT
        # The wait said whom it waited for (docs/cli.md), once its first slice found the lock held.
        assert waiting and all(line.startswith(WAITING_FOR_THE_WRITE_LOCK) for line in waiting), waiting
        refused = project.run_cli("lease", "acquire", "--holder", "agent-B", "--preempt", timeout=30).check(2)
        assert stderr_lines(refused.stderr) == [PREEMPT_REFUSED]
    assert kinds(db) == ["GRANT"]
    assert lease_row(db) == ("agent-A", 1, 200)


def test_a_run_queued_behind_a_migration_in_flight_leaves_without_the_lease(tmp_path: Path) -> None:
    """agent-B's `upgrade head` starts while agent-A's run migrates: B's grant waits for SQLite's
    write lock, which A's migration holds. A commits and releases; B, having waited behind another
    writer, looks again before taking the lease, finds the database at head and leaves: exit 0,
    nothing to do, and the log holds A's grant and nothing of B's."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    inside, go_on, connected = tmp_path / "inside", tmp_path / "go-on", tmp_path / "b-connected"
    add_held_open_revision(project, inside, go_on)
    connect = "    with connectable.connect() as connection:\n"
    project.edit_env(
        connect,
        connect
        + (
            "        import os, pathlib\n"
            "        if 'FENCEMIGRATE_TEST_CONNECTED' in os.environ:\n"
            "            pathlib.Path(os.environ['FENCEMIGRATE_TEST_CONNECTED']).touch()\n"
        ),
    )
    runner_a = start(project, "upgrade", "head", "--holder", "agent-A")
    runner_b = None
    try:
        wait_for_file(inside, runner_a)
        runner_b = start_process(
            [*script_command("fencemigrate"), "upgrade", "head", "--holder", "agent-B"],
            project.path,
            {"FENCEMIGRATE_TEST_CONNECTED": str(connected)},
        )
        wait_for_file(connected, runner_b)
        time.sleep(1.0)  # B's grant is now waiting for the write lock
        go_on.touch()
        _, stderr_a = runner_a.communicate(timeout=60)
        stdout_b, stderr_b = runner_b.communicate(timeout=60)
    finally:
        runner_a.kill()
        if runner_b is not None:
            runner_b.kill()
    assert runner_a.returncode == 0, stderr_a
    assert runner_b.returncode == 0, stderr_b
    assert "  nothing to do" in stdout_b.splitlines()
    assert (
        "  no lease taken: another runner finished the work while this one waited for the lease"
        in stdout_b.splitlines()
    )
    assert [(kind, holder) for kind, holder, _, _ in events(db)] == [
        ("GRANT", "agent-A"),
        ("APPLY", "agent-A"),
        ("RELEASE", "agent-A"),
    ]
    assert lease_row(db) == (None, 1, None)


# -- the run's own lease ------------------------------------------------------------------------------


@pytest.mark.serial
@pytest.mark.parametrize("per_migration", [False, True], ids=["one-transaction", "transaction-per-migration"])
def test_runner_heartbeats_inside_its_transaction_and_releases(tmp_path: Path, per_migration: bool) -> None:
    """Without --token the run takes a lease with a 1-second TTL, renews it after each revision
    inside its own migration transaction (the run outlives the TTL) and releases it at the end; a
    failing run releases it too, and its revision leaves nothing behind."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    if per_migration:
        project.set_env_option("transaction_per_migration", True)
    chain(project, 4, code="import time; time.sleep(0.5)")
    payload = json.loads(
        project.run_cli("upgrade", "head", "--holder", "runner", "--ttl", "1s", "--json").check(0).stdout
    )
    assert payload["leased"] is True and payload["lease_note"] is None and payload["token"] == 1
    logged = kinds(db)
    assert logged[0] == "GRANT" and logged[-1] == "RELEASE", logged
    assert logged.count("RENEW") >= 1 and logged.count("APPLY") == 4, logged
    assert {holder for _, holder, _, _ in events(db)} == {"runner"}
    assert lease_row(db) == (None, 1, None)
    assert user_tables(db) == ["t01", "t02", "t03", "t04"]

    add_table(project, "r05", "r04", "t05", "SELECT no_such_function()")
    failed = project.run_cli("upgrade", "head", "--holder", "runner").check(1)
    assert "no such function: no_such_function" in failed.stderr
    assert lease_row(db) == (None, 2, None)
    assert kinds(db)[-2:] == ["GRANT", "RELEASE"]
    assert "t05" not in table_names(db)


def test_eight_runners_at_once_on_an_empty_file(tmp_path: Path) -> None:
    """Eight `fencemigrate upgrade head` started together on an empty SQLite file: all exit 0, each
    of 30 revisions is applied exactly once, under one token. Control: eight plain
    `alembic upgrade head` at once do not all succeed."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    chain(project, 30)
    fencemigrate = [[*script_command("fencemigrate"), "upgrade", "head", "--holder", f"pod-{n}"] for n in range(8)]
    outcomes = all_at_once(project, fencemigrate)
    assert [code for code, _ in outcomes] == [0] * 8, outcomes
    assert alembic_versions(db) == ["r30"]
    assert len(user_tables(db)) == 30
    assert len(ledger(db)) == 30
    applies = query(
        db, f"SELECT count(*), count(DISTINCT revision), count(DISTINCT token) FROM {EVENTS} WHERE kind = 'APPLY'"
    )
    assert applies == [(30, 30, 1)]
    # Runners that waited while another did the work stop waiting without a lease; every grant
    # has its own token and is released.
    [(grants, tokens)] = query(db, f"SELECT count(*), count(DISTINCT token) FROM {EVENTS} WHERE kind = 'GRANT'")
    assert 1 <= grants <= 8 and tokens == grants == kinds(db).count("RELEASE")
    assert lease_row(db) == (None, grants, None)

    # Control: plain alembic, eight at once on a fresh file, until one of them fails.
    failures = 0
    for attempt in range(5):
        plain = make_sqlite_project(tmp_path, f"plain{attempt}", f"plain{attempt}.sqlite")
        chain(plain, 30)
        failures = sum(
            code != 0 for code, _ in all_at_once(plain, [[*script_command("alembic"), "upgrade", "head"]] * 8)
        )
        if failures:
            break
    assert failures, "plain alembic never failed with eight concurrent runners"


# -- Redis leases with a SQLite fence ---------------------------------------------------------------


@pytest.mark.serial
def test_redis_leases_with_a_sqlite_fence(tmp_path: Path, redis_url: str) -> None:
    """`--lease-url redis://` on a SQLite project: Redis issues the tokens, every grant advances the
    fence in the SQLite file, a run heartbeats (the RENEW events go into its migration transaction)
    and releases; --preempt is refused as with the built-in service."""
    project = make_sqlite_project(tmp_path)
    db = database(project)
    add_table(project, "a1", None, "t1")

    def lease(*args: str) -> Result:
        return project.run_cli("lease", *args, "--lease-url", redis_url)

    assert granted_token(lease("acquire", "--holder", "agent-A", "--json")) == 1
    assert fence_tokens(db) == {"db/migrations": 1}
    busy = lease("acquire", "--holder", "agent-B").check(4)
    assert "held by agent-A (token 1) until" in busy.stderr
    assert stderr_lines(lease("acquire", "--holder", "agent-B", "--preempt").check(2).stderr) == [PREEMPT_REFUSED]
    lease("renew", "--holder", "agent-B").check(3)
    lease("release", "--holder", "agent-A").check(0)

    slow_step = "import time; time.sleep(0.5)"
    add_table(project, "a2", "a1", "t2", code=slow_step)
    add_table(project, "a3", "a2", "t3", code=slow_step)
    add_table(project, "a4", "a3", "t4", code=slow_step)
    payload = json.loads(
        project.run_cli("upgrade", "head", "--holder", "runner", "--ttl", "1s", "--lease-url", redis_url, "--json")
        .check(0)
        .stdout
    )
    assert (payload["leased"], payload["token"], payload["lease_note"]) == (True, 2, None)
    assert fence_tokens(db) == {"db/migrations": 2}
    logged = [(kind, holder, token) for kind, holder, token, _ in events(db)]
    assert logged[:4] == [
        ("GRANT", "agent-A", 1),
        ("LOST", "agent-B", None),
        ("RELEASE", "agent-A", 1),
        ("GRANT", "runner", 2),
    ]
    runner = [kind for kind, holder, _ in logged if holder == "runner"]
    assert runner[-1] == "RELEASE" and runner.count("RENEW") >= 1 and runner.count("APPLY") == 4, runner
    assert json.loads(lease("status", "--json").check(0).stdout)["lease"]["holder"] is None

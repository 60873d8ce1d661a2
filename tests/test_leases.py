"""The built-in lease service on PostgreSQL: grants issue the tokens and fence older holders.

Every check goes through the ``fencemigrate`` command line against a real server, and reads the
result back from the database (lease row, fence row, event log, applied revisions).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from support.db import alembic_versions, execute, query, table_names
from support.fence_rows import assert_fenced, fence_token, ledger, scratch_database, snapshot, stderr_lines
from support.paused import paused_holder, stopped_lease_call
from support.pg import PgServer
from support.project import (
    MakeProject,
    Project,
    Result,
    run_all_at_once,
    run_command,
    script_command,
    start_process,
)
from support.zygote import Process

REPO = Path(__file__).resolve().parent.parent
LOST = "LEASE LOST: you no longer own db/migrations"


def acquire(project: Project, holder: str, *args: str, timeout: float = 120.0) -> Result:
    return project.run_cli("lease", "acquire", "--holder", holder, *args, timeout=timeout)


def granted_token(result: Result) -> int:
    return int(json.loads(result.check(0).stdout)["lease"]["token"])


def lease_row(url: str) -> tuple[Any, ...] | None:
    rows = query(url, "SELECT holder, token, ttl_ms FROM fencemigrate.lease WHERE resource = 'db/migrations'")
    return rows[0] if rows else None


def events(url: str) -> list[tuple[Any, ...]]:
    return query(url, "SELECT kind, holder, token, revision FROM fencemigrate.fence_event ORDER BY at, id")


def wait_until_expired(project: Project, timeout: float = 20.0) -> None:
    """Poll `lease status` until the DATABASE says the lease has expired."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = json.loads(project.run_cli("lease", "status", "--json").check(0).stdout)["lease"]
        if status["expired"]:
            return
        time.sleep(0.1)
    raise AssertionError("the lease did not expire by the database's clock")


def test_acquire_renew_release_and_status(project: Project, pg_url: str) -> None:
    """A grant issues token 1 with a fresh read of the state; another holder is busy (exit 4);
    renew or release by someone who does not hold it is LOST (exit 3); the holder renews and
    releases; a second release is LOST."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--token", "7", "--holder", "setup").check(0)

    payload = json.loads(acquire(project, "agent-A", "--ttl", "5m", "--json").check(0).stdout)
    assert payload["lease"]["holder"] == "agent-A"
    assert payload["lease"]["token"] == 8  # seeded from the fence, which token 7 reached
    assert payload["lease"]["ttl"] == "5m"
    assert payload["state"]["heads"] == ["a1"]
    assert [(row["revision"], row["applied_token"]) for row in payload["state"]["ledger"]] == [("a1", 7)]
    assert fence_token(pg_url) == 8  # fenced on grant, before agent-A writes anything

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
    stale = project.run_cli("lease", "renew", "--holder", "agent-A", "--token", "7").check(3)
    assert "your current grant has token 8, not 7" in stale.stderr

    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    assert lease_row(pg_url) == (None, 8, None)
    again = project.run_cli("lease", "release", "--holder", "agent-A").check(3)
    assert "(the lease is not held)" in again.stderr
    status = project.run_cli("lease", "status").check(0)
    assert status.stdout.splitlines() == ["db/migrations: free", "  last token issued: 8; fence token: 8"]
    assert [row[:3] for row in events(pg_url)] == [
        ("APPLY", "setup", 7),
        ("GRANT", "agent-A", 8),
        ("LOST", "agent-B", None),
        ("LOST", "agent-B", 8),
        ("RENEW", "agent-A", 8),
        ("LOST", "agent-A", 7),
        ("RELEASE", "agent-A", 8),
        ("LOST", "agent-A", None),
    ]


def test_grant_fences_the_old_holder_before_the_new_one_writes(project: Project, pg_url: str) -> None:
    """agent-A's lease expires (by the database's clock); agent-B's grant alone, before B writes
    anything, makes A's next write FENCED. Control: plain alembic lets A's write through."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    token_a = granted_token(acquire(project, "agent-A", "--ttl", "6s", "--json"))
    project.run_cli("upgrade", "a1", "--token", str(token_a), "--holder", "agent-A").check(0)
    wait_until_expired(project)

    token_b = granted_token(acquire(project, "agent-B", "--json"))
    assert token_b == token_a + 1
    assert fence_token(pg_url) == token_b

    project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    before = snapshot(pg_url)
    assert_fenced(
        project.run_cli("upgrade", "head", "--token", str(token_a), "--holder", "agent-A"),
        token_a,
        token_b,
        granted_only=True,
    )
    assert snapshot(pg_url) == before

    assert events(pg_url) == [
        ("GRANT", "agent-A", token_a, None),
        ("APPLY", "agent-A", token_a, "a1"),
        ("EXPIRE", "agent-A", token_a, None),
        ("GRANT", "agent-B", token_b, None),
        ("FENCED", "agent-A", token_a, "head"),
    ]
    # Control: without the fence, agent-A's stale write goes straight in.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(pg_url) == ["b2"]


def test_expiry_is_judged_by_the_database_clock(project: Project, pg_url: str) -> None:
    """A client whose clock runs two hours ahead still sees agent-A's 5-minute lease as live
    (busy, exit 4); one whose clock runs two hours behind still sees a lease that the database
    has expired as expired (granted, exit 0)."""
    faketime = shutil.which("faketime")
    assert faketime, "faketime (Debian package faketime) is needed: bash .ci/test installs it"
    acquire(project, "agent-A", "--ttl", "5m").check(0)

    ahead = [faketime, "-f", "+2h", *script_command("fencemigrate")]
    busy = run_command([*ahead, "lease", "acquire", "--holder", "agent-B"], project.path)
    busy.check(4)
    status = json.loads(run_command([*ahead, "lease", "status", "--json"], project.path).check(0).stdout)
    assert status["lease"]["expired"] is False

    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    acquire(project, "agent-A", "--ttl", "200ms").check(0)
    wait_until_expired(project)
    behind = [faketime, "-f", "-2h", *script_command("fencemigrate")]
    granted = json.loads(
        run_command([*behind, "lease", "acquire", "--holder", "agent-B", "--json"], project.path).check(0).stdout
    )
    assert granted["lease"]["previous_holder"] == "agent-A"
    assert lease_row(pg_url) == ("agent-B", 3, 60000)


def test_token_counter_survives_a_database_restart(make_project: MakeProject, tmp_path: Path) -> None:
    """Tokens keep going up across a real server restart, and the counter cannot be lowered."""
    started = subprocess.run(["bash", str(REPO / ".ci/postgres"), "start"], capture_output=True, text=True, check=True)
    settings = dict(line.split("=", 1) for line in started.stdout.split())
    try:
        server = PgServer("127.0.0.1", int(settings["PGPORT"]))
        url = server.url("postgres")
        project = make_project(url=url, name="restarted")
        tokens = []
        for holder in ("a", "b", "c"):
            tokens.append(granted_token(acquire(project, holder, "--json")))
            project.run_cli("lease", "release", "--holder", holder).check(0)
        subprocess.run(["bash", str(REPO / ".ci/postgres"), "restart", settings["PGDATA"]], check=True)
        tokens.append(granted_token(acquire(project, "d", "--json")))
        assert tokens == [1, 2, 3, 4]
        with pytest.raises(Exception, match="monotonic"):
            execute(url, "UPDATE fencemigrate.lease SET token = 1")
        with pytest.raises(Exception, match="monotonic"):
            execute(url, "DELETE FROM fencemigrate.lease")
        assert lease_row(url) == ("d", 4, 60000)
    finally:
        subprocess.run(["bash", str(REPO / ".ci/postgres"), "stop", settings["PGDATA"]], check=False)


def _start(project: Project, *args: str) -> Process:
    return start_process([*script_command("fencemigrate"), *args], project.path)


def _wait_for_backend(url: str, condition: str, what: str, timeout: float = 30.0) -> None:
    """Until a session of pg_stat_activity (not this one) matches ``condition``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query(url, f"SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND {condition}")[0][0]:
            return
        time.sleep(0.05)
    raise AssertionError(what)


def _wait_for_sleeping_migration(url: str) -> None:
    _wait_for_backend(url, "query LIKE 'SELECT pg_sleep(%'", "the migration never reached its slow statement")


def test_preempt_cancels_a_stale_in_flight_migration(project: Project, pg_url: str) -> None:
    """agent-A's run takes a 1-second lease and stalls inside a revision. A grant without
    --preempt waits at most --wait and reports busy (exit 4); with --preempt it cancels A's
    transaction, which rolls back completely, and A exits LEASE LOST (3)."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("b2", "a1", ["CREATE TABLE t2 (id int)", "SELECT pg_sleep(60)"], "DROP TABLE t2", slug="t2")
    runner = _start(project, "upgrade", "head", "--holder", "agent-A", "--ttl", "1s")
    try:
        _wait_for_sleeping_migration(pg_url)
        wait_until_expired(project)
        busy = acquire(project, "agent-B", "--wait", "500ms").check(4)
        assert "a migration under an older token is still in flight" in busy.stderr
        payload = json.loads(acquire(project, "agent-B", "--preempt", "--json").check(0).stdout)
        _, stderr = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 3, stderr
    assert f"fencemigrate: lost: {LOST} (it has been granted to agent-B with token 2)." in stderr
    assert payload["lease"]["token"] == 2 and payload["lease"]["previous_holder"] == "agent-A"
    assert len(payload["lease"]["preempted_pids"]) == 1
    assert table_names(pg_url) == [
        "alembic_version"
    ]  # t1 and t2 rolled back with A's one transaction; B's grant made the version table
    assert alembic_versions(pg_url) is None or alembic_versions(pg_url) == []
    assert ledger(pg_url) == {}
    assert [row[:3] for row in events(pg_url)] == [
        ("GRANT", "agent-A", 1),
        ("EXPIRE", "agent-A", 1),
        ("PREEMPT", "agent-B", 2),
        ("GRANT", "agent-B", 2),
        ("LOST", "agent-A", 1),
    ]


# svc-32835 and svc-62004: two names with one hashtext(), which keyed every advisory lock before
# fence schema 0.10 (issue 24, 8(a)).
COLLIDING = ("svc-32835", "svc-62004")


def test_the_colliding_names_share_a_hashtext_key(pg_url: str) -> None:
    """Control: keyed by hashtext(resource), as claim() was, the two names' claim locks are one lock,
    and the old preempt query for svc-32835 finds a session that claimed svc-62004 only."""
    assert query(pg_url, "SELECT hashtext('svc-32835') = hashtext('svc-62004')") == [(True,)]
    holder = textwrap.dedent(
        f"""
        import psycopg, sys
        connection = psycopg.connect({pg_url.replace("postgresql+psycopg://", "postgresql://")!r})
        connection.execute("SELECT pg_advisory_xact_lock_shared(1718503789, hashtext('svc-62004'))")
        print(connection.execute("SELECT pg_backend_pid()").fetchone()[0], flush=True)
        sys.stdin.read()
        """
    )
    with paused_holder(holder) as pid:
        found = query(
            pg_url,
            "SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid = 1718503789 "
            "AND l.objid = hashtext('svc-32835')::oid AND l.objsubid = 2 AND l.granted",
        )
    assert found == [(int(pid),)]


def test_preempting_one_resource_leaves_a_colliding_resources_migration_alone(project: Project, pg_url: str) -> None:
    """svc-62004's migration is in flight (its first claim, under an external token); a grant of
    svc-32835 with --preempt cancels nobody and svc-62004's migration commits. Each name has a lock
    key of its own; the first keeps hashtext(), the second gets the next free key."""
    project.add_revision("a1", None, ["CREATE TABLE t1 (id int)", "SELECT pg_sleep(3)"], "DROP TABLE t1", slug="t1")
    first, second = COLLIDING[1], COLLIDING[0]
    runner = _start(project, "upgrade", "head", "--resource", first, "--token", "5", "--holder", "agent-A")
    try:
        _wait_for_sleeping_migration(pg_url)
        granted = acquire(project, "agent-B", "--resource", second, "--preempt", "--json").check(0)
        _, stderr = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 0, stderr
    assert json.loads(granted.stdout)["lease"]["preempted_pids"] == []
    assert alembic_versions(pg_url) == ["a1"]
    keys = dict(query(pg_url, "SELECT resource, key FROM fencemigrate.resource_lock_key"))
    assert keys[first] == query(pg_url, f"SELECT hashtext('{first}')")[0][0]
    assert keys[second] != keys[first]


def test_a_first_claim_in_flight_is_waited_for_or_preempted(project: Project, pg_url: str) -> None:
    """The first claim of a resource, its lock key not committed yet: a grant waits for it (busy
    after --wait) or, with --preempt, cancels it; the key the claim took is the one the grant finds."""
    project.add_revision("a1", None, ["CREATE TABLE t1 (id int)", "SELECT pg_sleep(60)"], "DROP TABLE t1", slug="t1")
    runner = _start(project, "upgrade", "head", "--resource", COLLIDING[0], "--token", "5", "--holder", "agent-A")
    try:
        _wait_for_sleeping_migration(pg_url)
        busy = acquire(project, "agent-B", "--resource", COLLIDING[0], "--wait", "500ms").check(4)
        assert "a migration under an older token is still in flight" in busy.stderr
        granted = acquire(project, "agent-B", "--resource", COLLIDING[0], "--preempt", "--json").check(0)
        _, stderr = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 1 and "terminating connection due to administrator command" in stderr, stderr
    assert len(json.loads(granted.stdout)["lease"]["preempted_pids"]) == 1
    assert table_names(pg_url) == ["alembic_version"]


@pytest.mark.serial
def test_preempt_never_touches_another_databases_runs(
    make_project: MakeProject, pg_url: str, pg_conn: Any, pg_server: PgServer
) -> None:
    """Two databases of one server, one resource name: agent-A's run in d1 holds a live lease and
    works; agent-B's run in d2 has an expired lease and stalls. `lease acquire --preempt` in d2
    cancels B's run only: pg_locks is server-wide, the preempt is this database's. Control: the
    same preempt in d1 (where the lease is live) is busy and cancels nobody."""
    with scratch_database(pg_conn, pg_server, "other") as other_url:
        healthy, stale = make_project(url=pg_url, name="d1"), make_project(url=other_url, name="d2")
        healthy.add_revision("a1", None, ["CREATE TABLE t1 (id int)", "SELECT pg_sleep(8)"], "DROP TABLE t1", slug="t1")
        stale.add_revision("b1", None, ["CREATE TABLE t2 (id int)", "SELECT pg_sleep(60)"], "DROP TABLE t2", slug="t2")
        working = _start(healthy, "upgrade", "head", "--holder", "agent-A", "--ttl", "60s")
        stalled = _start(stale, "upgrade", "head", "--holder", "agent-B", "--ttl", "1s")
        try:
            for url in (pg_url, other_url):
                database = url.rsplit("/", 1)[1]
                _wait_for_backend(
                    url,
                    f"datname = '{database}' AND query LIKE 'SELECT pg_sleep(%'",
                    f"the migration in {database} never reached its slow statement",
                )
            wait_until_expired(stale)
            busy = acquire(healthy, "agent-C", "--preempt").check(4)
            assert "held by agent-A" in busy.stderr
            payload = json.loads(acquire(stale, "agent-C", "--preempt", "--json").check(0).stdout)
            _, stalled_err = stalled.communicate(timeout=60)
            _, working_err = working.communicate(timeout=60)
        finally:
            stalled.kill()
            working.kill()
        assert len(payload["lease"]["preempted_pids"]) == 1
        assert stalled.returncode == 3, stalled_err
        assert working.returncode == 0, working_err
        assert alembic_versions(pg_url) == ["a1"]
        assert alembic_versions(other_url) in (None, [])


def _lease_row_locked_by_a_paused_process(url: str) -> str:
    """agent-A's renewal, stopped after its UPDATE of the lease row (not committed)."""
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    return f"""
        import psycopg, sys
        connection = psycopg.connect({dsn!r})
        pid = connection.execute("SELECT pg_backend_pid()").fetchone()[0]
        connection.execute("UPDATE fencemigrate.lease SET expires_at = clock_timestamp() + interval '1 hour' "
                           "WHERE resource = 'db/migrations' AND holder = 'agent-A'")
        print(pid, flush=True)
        sys.stdin.read()
    """


@pytest.mark.serial
def test_a_holder_paused_inside_a_lease_transaction_blocks_nobody_beyond_wait(project: Project, pg_url: str) -> None:
    """agent-A's renewal is stopped with SIGSTOP inside its transaction, the lease row changed and
    locked (as a grant, renew or release leaves it until it commits). While A's lease is live,
    --preempt is busy and cancels nothing. Once it has expired, a grant with --wait 2s and agent-A's
    renew answer busy (exit 4) instead of hanging, and --preempt cancels A's stuck transaction and is granted."""
    acquire(project, "agent-A", "--ttl", "3s").check(0)
    with paused_holder(_lease_row_locked_by_a_paused_process(pg_url)) as pid:
        live = acquire(project, "agent-B", "--preempt", timeout=60).check(4)
        assert "held by agent-A (token 1)" in live.stderr
        assert query(pg_url, f"SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}") == [(1,)]
        wait_until_expired(project)
        busy = acquire(project, "agent-B", "--wait", "2s", timeout=60).check(4)
        assert stderr_lines(busy.stderr) == [
            "fencemigrate: busy: lease on db/migrations is busy: another grant, renew or release of it has not "
            "finished (its process may be paused or stopped), and the lease of agent-A (token 1) has expired; "
            "this is transient, try again later"
        ]
        renew = project.run_cli("lease", "renew", "--holder", "agent-A", timeout=60).check(4)
        assert "another grant, renew or release of it has not finished" in renew.stderr
        payload = json.loads(acquire(project, "agent-B", "--preempt", "--json", timeout=60).check(0).stdout)
        assert payload["lease"]["preempted_pids"] == [int(pid)]
        assert payload["lease"]["token"] == 2
    assert [row[:3] for row in events(pg_url)] == [
        ("GRANT", "agent-A", 1),
        ("EXPIRE", "agent-A", 1),
        ("PREEMPT", "agent-B", 2),
        ("GRANT", "agent-B", 2),
    ]


def test_a_grant_paused_on_a_free_lease_is_busy_then_preempted(project: Project, pg_url: str) -> None:
    """agent-X's grant (fencemigrate's own code) is stopped with SIGSTOP inside its transaction,
    on a free lease: a grant with --wait 1s is busy and says the lease is free, not "held by None";
    --preempt ends X's stuck grant (its session idle in its transaction) and is granted token 2."""
    acquire(project, "agent-A").check(0)
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    grant = 'leases.acquire(LeaseRequest("db/migrations", "agent-X", 3600000))'
    with paused_holder(stopped_lease_call(project.url, grant, "SELECT pg_backend_pid()")) as pid:
        busy = acquire(project, "agent-B", "--wait", "1s", timeout=60).check(4)
        assert stderr_lines(busy.stderr) == [
            "fencemigrate: busy: lease on db/migrations is busy: another grant, renew or release of it has not "
            "finished (its process may be paused or stopped), and the lease is free (last token issued: 1); "
            "this is transient, try again later"
        ]
        payload = json.loads(acquire(project, "agent-B", "--preempt", "--json", timeout=60).check(0).stdout)
    assert (payload["lease"]["token"], payload["lease"]["preempted_pids"]) == (2, [int(pid)])
    assert lease_row(pg_url) == ("agent-B", 2, 60000)
    assert [row[:3] for row in events(pg_url)] == [
        ("GRANT", "agent-A", 1),
        ("RELEASE", "agent-A", 1),
        ("PREEMPT", "agent-B", 2),
        ("GRANT", "agent-B", 2),
    ]


def test_a_release_notifies_waiters_and_a_refused_one_does_not(project: Project, pg_conn: Any) -> None:
    """Releasing a lease NOTIFYs fencemigrate_lease with the resource, when the release commits;
    a release by someone who does not hold the lease (LOST) sends nothing."""
    acquire(project, "agent-A").check(0)
    pg_conn.execute("LISTEN fencemigrate_lease")
    project.run_cli("lease", "release", "--holder", "agent-B").check(3)
    assert list(pg_conn.notifies(timeout=0.5, stop_after=1)) == []
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    assert [notice.payload for notice in pg_conn.notifies(timeout=10, stop_after=1)] == ["db/migrations"]


def test_a_waiting_grant_is_granted_once_the_lease_is_released(project: Project, pg_url: str) -> None:
    """agent-B waits for agent-A's lease (on PostgreSQL it sleeps until a release wakes it, or a
    second at most) and is granted the next token once A releases."""
    acquire(project, "agent-A").check(0)
    waiter = _start(project, "lease", "acquire", "--holder", "agent-B", "--wait", "60s", "--json")
    try:
        _wait_for_connected_waiter(pg_url)
        project.run_cli("lease", "release", "--holder", "agent-A").check(0)
        stdout, stderr = waiter.communicate(timeout=60)
    finally:
        waiter.kill()
    assert waiter.returncode == 0, stderr
    assert json.loads(stdout)["lease"]["token"] == 2
    assert [row[:3] for row in events(pg_url)] == [
        ("GRANT", "agent-A", 1),
        ("RELEASE", "agent-A", 1),
        ("GRANT", "agent-B", 2),
    ]


def _wait_for_connected_waiter(url: str) -> None:
    """Until the waiting process has connected (agent-A's command has exited: it is the only one)."""
    _wait_for_backend(url, "datname = current_database() AND state = 'idle'", "the waiting grant never connected")


@pytest.mark.serial
def test_runner_heartbeats_while_it_makes_progress_and_releases(project: Project, pg_url: str) -> None:
    """Without --token the run takes a lease with a 1-second TTL, renews it between revisions
    (the run outlives the TTL) and releases it at the end; a failing run releases it too."""
    project.set_env_option("transaction_per_migration", True)
    for number in range(1, 5):
        down = f"r{number - 1}" if number > 1 else None
        project.add_revision(
            f"r{number}",
            down,
            [f"CREATE TABLE t{number} (id int)", "SELECT pg_sleep(0.5)"],
            f"DROP TABLE t{number}",
            slug=f"t{number}",
        )
    result = project.run_cli("upgrade", "head", "--holder", "runner", "--ttl", "1s", "--json").check(0)
    payload = json.loads(result.stdout)
    assert payload["leased"] is True and payload["lease_note"] is None and payload["token"] == 1
    kinds = [kind for kind, *_ in events(pg_url)]
    assert kinds[0] == "GRANT" and kinds[-1] == "RELEASE"
    assert kinds.count("RENEW") >= 1 and kinds.count("APPLY") == 4
    assert lease_row(pg_url) == (None, 1, None)

    project.add_revision(
        "r5", "r4", ["CREATE TABLE t5 (id int)", "SELECT no_such_function()"], "DROP TABLE t5", slug="t5"
    )
    project.run_cli("upgrade", "head", "--holder", "runner").check(1)
    assert lease_row(pg_url) == (None, 2, None)
    assert [kind for kind, *_ in events(pg_url)][-2:] == ["GRANT", "RELEASE"]
    assert "t5" not in table_names(pg_url)


def test_a_run_whose_lease_was_taken_over_before_its_release_says_so_once(project: Project, tmp_path: Path) -> None:
    """agent-A's run commits its revision, then (env.py still running) its 1-second lease expires
    and agent-B is granted it. The run's work stands (exit 0); its output says, once, that its
    lease was taken over and not released, never that it was released."""
    inside, go_on = tmp_path / "inside", tmp_path / "go-on"
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.env_py.write_text(
        project.env_py.read_text()
        + textwrap.dedent(f"""
        import pathlib, sys, time
        if "upgrade" in sys.argv:  # the run, not the state reads of `lease acquire`
            pathlib.Path({str(inside)!r}).touch()
            deadline = time.monotonic() + 60
            while not pathlib.Path({str(go_on)!r}).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
    """)
    )
    runner = _start(project, "upgrade", "head", "--holder", "agent-A", "--ttl", "1s")
    try:
        deadline = time.monotonic() + 60
        while not inside.exists():
            assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()
            time.sleep(0.05)
        wait_until_expired(project)
        acquire(project, "agent-B").check(0)
        go_on.touch()
        stdout, stderr = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 0, stderr
    assert stdout.splitlines()[:2] == [
        "upgrade done: resource db/migrations, token 1, holder agent-A",
        "  the token came from a lease this run took; it was not released: it has been granted to agent-B with token 2",
    ]
    assert "released" not in "\n".join(stdout.splitlines()[2:])


def test_eight_runners_at_once_on_an_empty_database(
    make_project: MakeProject, pg_url: str, pg_conn: Any, pg_server: PgServer
) -> None:
    """Eight `fencemigrate upgrade head` started together on an empty database (the Kubernetes
    case): all exit 0, each of 30 revisions is applied exactly once, under one token.
    Control: eight plain `alembic upgrade head` at once do not all succeed."""
    project = make_project()
    project.add_chain(30)
    fencemigrate = [[*script_command("fencemigrate"), "upgrade", "head", "--holder", f"pod-{n}"] for n in range(8)]
    outcomes = run_all_at_once(project.path, fencemigrate)
    assert [code for code, _ in outcomes] == [0] * 8, outcomes
    assert alembic_versions(pg_url) == ["r30"]
    assert len(table_names(pg_url)) == 31
    assert len(ledger(pg_url)) == 30
    applies = query(
        pg_url,
        "SELECT count(*), count(DISTINCT revision), count(DISTINCT token) "
        "FROM fencemigrate.fence_event WHERE kind = 'APPLY'",
    )
    assert applies == [(30, 30, 1)]
    # Runners that waited while another did the work stop waiting without a lease; every grant
    # has its own token and is released.
    [(grants, tokens, releases)] = query(
        pg_url,
        "SELECT count(*) FILTER (WHERE kind = 'GRANT'), count(DISTINCT token) FILTER (WHERE kind = 'GRANT'), "
        "count(*) FILTER (WHERE kind = 'RELEASE') FROM fencemigrate.fence_event",
    )
    assert 1 <= grants <= 8 and tokens == grants == releases

    # Control: plain alembic, eight at once on a fresh database, until one of them fails.
    failures = 0
    for attempt in range(3):
        with scratch_database(pg_conn, pg_server, "plain") as url:
            plain = make_project(url=url, name=f"plain{attempt}")
            plain.add_chain(30)
            failures = sum(
                code != 0
                for code, _ in run_all_at_once(plain.path, [[*script_command("alembic"), "upgrade", "head"]] * 8)
            )
        if failures:
            break
    assert failures, "plain alembic never failed with eight concurrent runners"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["lease", "acquire", "--holder", "a", "--ttl", "0"],
            "invalid --ttl '0': a lease TTL must be more than zero",
            id="ttl-zero",
        ),
        pytest.param(
            ["lease", "acquire", "--holder", "a", "--ttl", "-5m"],
            "invalid --ttl '-5m': a duration cannot be negative",
            id="ttl-negative",
        ),
        pytest.param(
            ["lease", "acquire", "--holder", "a", "--ttl", "48h"],
            "invalid --ttl '48h': at most 24h; a lease is renewed while its holder makes progress, so pick a short TTL",
            id="ttl-absurd",
        ),
        pytest.param(
            ["lease", "acquire", "--holder", "a", "--ttl", "soon"],
            "invalid --ttl 'soon': expected a duration such as 30s, 5m or 250ms",
            id="ttl-garbage",
        ),
        pytest.param(
            ["lease", "acquire", "--holder", "a", "--wait", "-1s"],
            "invalid --wait '-1s': a duration cannot be negative",
            id="wait-negative",
        ),
        pytest.param(["lease", "acquire", "--holder", ""], "holder name must not be empty", id="holder-empty"),
        pytest.param(
            ["lease", "acquire"],
            "--holder NAME is required: the lease is granted to a named holder",
            id="holder-missing",
        ),
        pytest.param(
            ["lease", "acquire", "--holder", "a", "--lease-url", "memcached://127.0.0.1:1"],
            "unknown lease backend URL 'memcached://127.0.0.1:1': use redis://HOST:PORT/DB (or leave it "
            "out for the built-in lease service in the migration database)",
            id="backend-unknown",
        ),
        pytest.param(
            ["lease", "renew", "--holder", "a", "--token", "0"],
            "invalid token '0': must be an integer from 1 to 4611686018427387904",
            id="renew-token",
        ),
        pytest.param(
            ["upgrade", "head", "--ttl", "0"],
            "invalid --ttl '0': a lease TTL must be more than zero",
            id="runner-ttl-zero",
        ),
        pytest.param(
            ["upgrade", "head", "--token", "5", "--ttl", "1m"],
            "--ttl applies only when fencemigrate takes the lease itself; with --token your own lease "
            "service issued the token",
            id="token-and-ttl",
        ),
        pytest.param(
            ["reapply", "a1"],
            "reapply needs --token N, the token that applied the revision (or FENCEMIGRATE_TOKEN): a new "
            "lease's token could never re-apply it",
            id="reapply-without-token",
        ),
        pytest.param(
            ["upgrade", "head", "--sql", "--preempt"],
            "--preempt cannot be used with --sql: a script cannot cancel another session's migration; "
            "nothing was written",
            id="sql-preempt",
        ),
    ],
)
def test_bad_lease_input_changes_nothing(project: Project, pg_url: str, args: list[str], message: str) -> None:
    """Each bad input: exit 2, one clear line, and the database exactly as it was (no fence schema)."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    before = query(pg_url, "SELECT nspname FROM pg_namespace ORDER BY 1"), table_names(pg_url)
    result = project.run_cli(*args).check(2)
    assert stderr_lines(result.stderr) == [f"fencemigrate: usage: {message}"]
    assert (query(pg_url, "SELECT nspname FROM pg_namespace ORDER BY 1"), table_names(pg_url)) == before


def test_async_env_takes_and_releases_its_own_lease(make_project: MakeProject, pg_url: str) -> None:
    """With the async template's env.py, a run without --token takes its lease, applies and
    releases it after env.py's event loop has ended; a stale token's FENCED is logged too."""
    project = make_project("async")
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    result = project.run_cli("upgrade", "head", "--holder", "async-runner", "--json").check(0)
    assert json.loads(result.stdout)["leased"] is True
    assert lease_row(pg_url) == (None, 1, None)
    project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    project.run_cli("upgrade", "head", "--holder", "async-runner").check(0)
    assert_fenced(project.run_cli("downgrade", "a1", "--token", "1", "--holder", "stale"), 1, 2)
    assert events(pg_url) == [
        ("GRANT", "async-runner", 1, None),
        ("APPLY", "async-runner", 1, "a1"),
        ("RELEASE", "async-runner", 1, None),
        ("GRANT", "async-runner", 2, None),
        ("APPLY", "async-runner", 2, "b2"),
        ("RELEASE", "async-runner", 2, None),
        ("FENCED", "stale", 1, "a1"),
    ]

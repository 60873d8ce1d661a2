"""The built-in lease service on a real MariaDB, and runs that take their own lease there.

A grant takes the resource's named lock, which every pre-check writer holds for its whole run:
a grant never slips in under an in-flight writer; it waits (busy after --wait) or, with
--preempt, kills the writer's session, whose revision then stays dirty.
"""

from __future__ import annotations

import json
import time

import pytest
from support.background_runs import SLOW_UPGRADE, finish, lock_holder, start, wait_for
from support.mysql_rows import app_tables, events, fence_tokens, ledger, versions
from support.mysql_server import create_test_database, drop_test_database, mysql_rows
from support.paused import paused_holder, renewal_script, stopped_lease_call
from support.project import MakeProject, run_all_at_once, script_command


def test_run_without_token_takes_renews_and_releases_its_lease(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    project.add_chain(3)
    out = project.run_cli("upgrade", "head", "--holder", "pod-1").check(0)
    lines = out.stdout.splitlines()
    assert lines[0] == "upgrade done: resource db/migrations, token 1, holder pod-1"
    assert "  the token came from a lease this run took and released" in lines  # no renewal: none said
    assert versions(mysql_url) == ["r03"]
    assert [kind for kind, *_ in events(mysql_url)] == ["GRANT", "APPLY", "APPLY", "APPLY", "RELEASE"]
    status = json.loads(project.run_cli("lease", "status", "--json").check(0).stdout)["lease"]
    assert (status["holder"], status["token"], status["fence_token"]) == (None, 1, 1)


def test_lease_commands_busy_and_lost(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    project.add_chain(1)
    project.run_cli("upgrade", "head", "--token", "7").check(0)
    grant = json.loads(project.run_cli("lease", "acquire", "--holder", "A", "--json").check(0).stdout)
    assert grant["lease"]["token"] == 8  # above the fence's 7
    assert grant["state"]["heads"] == ["r01"] and grant["state"]["fences"][0]["token"] == 8
    assert fence_tokens(mysql_url) == {"db/migrations": 8}  # fence on grant
    busy = project.run_cli("lease", "acquire", "--holder", "B")
    busy.check(4)
    assert "lease on db/migrations is busy: held by A (token 8) until " in busy.stderr
    lost = project.run_cli("lease", "renew", "--holder", "B")
    lost.check(3)
    assert "LEASE LOST: you no longer own db/migrations" in lost.stderr
    project.run_cli("lease", "renew", "--holder", "A", "--ttl", "2m").check(0)
    project.run_cli("lease", "release", "--holder", "A").check(0)
    project.run_cli("lease", "release", "--holder", "A").check(3)
    project.add_revision("r02", "r01", "CREATE TABLE t02 (id int)", "DROP TABLE t02", slug="t02")
    stale = project.run_cli("upgrade", "head", "--token", "7")
    stale.check(3)
    assert "FENCED: you no longer own db/migrations." in stale.stderr.splitlines()
    assert "t02" not in app_tables(mysql_url)
    assert [kind for kind, *_ in events(mysql_url)] == [
        "APPLY",
        "GRANT",
        "LOST",
        "RENEW",
        "RELEASE",
        "LOST",
        "FENCED",
    ]


def test_eight_runners_at_once_on_an_empty_database(
    make_project: MakeProject, mysql_url: str, mysql_server_url: str
) -> None:
    """Eight `fencemigrate upgrade head` at once on an empty MariaDB database all exit 0 and apply
    each of 30 revisions once; eight plain `alembic upgrade head` do not all succeed."""
    project = make_project(url=mysql_url)
    project.add_chain(30)
    argv = [[*script_command("fencemigrate"), "upgrade", "head", "--holder", f"pod-{n}"] for n in range(8)]
    outcomes = run_all_at_once(project.path, argv)
    assert [code for code, _ in outcomes] == [0] * 8, [stderr[-2000:] for code, stderr in outcomes if code]
    assert versions(mysql_url) == ["r30"]
    assert len(app_tables(mysql_url)) == 31
    assert len(ledger(mysql_url)) == 30
    applies = mysql_rows(
        mysql_url,
        "SELECT COUNT(*), COUNT(DISTINCT revision), COUNT(DISTINCT token) "
        "FROM fencemigrate_fence_event WHERE kind = 'APPLY'",
    )
    assert applies == [(30, 30, 1)]

    failures = 0
    for attempt in range(3):
        url = create_test_database(mysql_server_url)
        try:
            plain = make_project(url=url, name=f"plain{attempt}")
            plain.add_chain(30)
            failures = sum(
                code != 0
                for code, _ in run_all_at_once(plain.path, [[*script_command("alembic"), "upgrade", "head"]] * 8)
            )
        finally:
            drop_test_database(url)
        if failures:
            break
    assert failures, "plain alembic never failed with eight concurrent runners"


@pytest.mark.serial
def test_grant_waits_for_an_in_flight_writer_or_preempts_it(make_project: MakeProject, mysql_url: str) -> None:
    """A grant never slips under a writer holding the named lock: busy after --wait; --preempt kills
    the writer's session, and its unfinished revision is reported dirty."""
    project = make_project(url=mysql_url)
    project.add_revision(
        "0001", None, ["CREATE TABLE early (id int)"], extra_upgrade_code=SLOW_UPGRADE.format(seconds=4, table="late")
    )
    writer = start(project, "upgrade", "head", "--token", "5", "--holder", "stale")
    wait_for(lambda: "early" in app_tables(mysql_url))
    writer_session = lock_holder(mysql_url)
    assert writer_session is not None

    busy = project.run_cli("lease", "acquire", "--holder", "fresh", "--wait", "1s")
    busy.check(4)
    last = busy.stderr.splitlines()[-1]
    assert last.startswith(
        "fencemigrate: busy: lease on db/migrations is busy: a migration under an older token is still in "
        "flight (its holder's lease has expired); wait for it, or pass --preempt to cancel it "
        f"(held by connection {writer_session} (stale, token 5) since "
    ), last
    assert last.endswith("; waited 1s; this is transient, try again later"), last
    assert fence_tokens(mysql_url) == {"db/migrations": 5}

    grant = json.loads(project.run_cli("lease", "acquire", "--holder", "fresh", "--preempt", "--json").check(0).stdout)
    assert grant["lease"]["token"] == 6
    assert fence_tokens(mysql_url) == {"db/migrations": 6}
    result = finish(writer)
    assert result.code == 1, result
    assert "late" not in app_tables(mysql_url)
    assert ledger(mysql_url) == {"0001": (5, "stale", "applying")}
    preempts = [event for event in events(mysql_url) if event[0] == "PREEMPT"]
    assert preempts == [("PREEMPT", "fresh", 6, None)]
    detail = mysql_rows(mysql_url, "SELECT detail FROM fencemigrate_fence_event WHERE kind = 'PREEMPT'")[0][0]
    assert json.loads(detail) == {"cancelled_pid": writer_session}
    dirty = project.run_cli("upgrade", "head", "--token", "6")
    dirty.check(5)


def test_a_holder_paused_inside_its_renewal_blocks_nobody_beyond_wait(
    make_project: MakeProject, mysql_url: str
) -> None:
    """agent-A's renewal is stopped with SIGSTOP inside its transaction (the lease row changed and
    locked, not committed), after A's lease has expired. A grant with --wait 2s and another renew
    answer busy (exit 4) instead of waiting for InnoDB's 50-second lock wait; nothing changed."""
    project = make_project(url=mysql_url)
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--ttl", "1s").check(0)
    wait_for(lambda: bool(mysql_rows(mysql_url, "SELECT expires_at <= UTC_TIMESTAMP(6) FROM fencemigrate_lease")[0][0]))
    with paused_holder(renewal_script(mysql_url, "agent-A", "SELECT CONNECTION_ID()")):
        busy = project.run_cli("lease", "acquire", "--holder", "agent-B", "--wait", "2s", timeout=30).check(4)
        assert busy.stderr.splitlines()[-1] == (
            "fencemigrate: busy: lease on db/migrations is busy: another grant, renew or release of it has not "
            "finished (its process may be paused or stopped), and the lease of agent-A (token 1) has expired; "
            "this is transient, try again later"
        )
        renew = project.run_cli("lease", "renew", "--holder", "agent-A", timeout=30).check(4)
        assert "another grant, renew or release of it has not finished" in renew.stderr
    assert [kind for kind, *_ in events(mysql_url)] == ["GRANT"]
    assert mysql_rows(mysql_url, "SELECT holder, token FROM fencemigrate_lease") == [("agent-A", 1)]


@pytest.mark.serial
def test_preempt_kills_a_holder_stopped_inside_its_renewal_once_its_lease_expired(
    make_project: MakeProject, mysql_url: str
) -> None:
    """agent-A's renewal is stopped with SIGSTOP inside its transaction while A's lease is live:
    --preempt is busy and kills nobody (control). Once A's lease has expired, a grant with
    --wait 2s is busy within about the wait, and --preempt kills A's connection (named by the
    resource's lease lock) and is granted token 2."""
    project = make_project(url=mysql_url)
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--ttl", "6s").check(0)
    with paused_holder(renewal_script(mysql_url, "agent-A", "SELECT CONNECTION_ID()")) as connection_id:
        live = project.run_cli("lease", "acquire", "--holder", "agent-B", "--preempt", timeout=30).check(4)
        assert "held by agent-A (token 1)" in live.stderr
        assert mysql_rows(
            mysql_url, f"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {connection_id}"
        ) == [(1,)]
        wait_for(
            lambda: bool(mysql_rows(mysql_url, "SELECT expires_at <= UTC_TIMESTAMP(6) FROM fencemigrate_lease")[0][0])
        )
        started = time.monotonic()
        project.run_cli("lease", "acquire", "--holder", "agent-B", "--wait", "2s", timeout=30).check(4)
        assert time.monotonic() - started < 10
        granted = project.run_cli(
            "lease", "acquire", "--holder", "agent-B", "--wait", "2s", "--preempt", "--json", timeout=30
        ).check(0)
        payload = json.loads(granted.stdout)
        assert (payload["lease"]["token"], payload["lease"]["preempted_pids"]) == (2, [int(connection_id)])
    assert [kind for kind, *_ in events(mysql_url)] == ["GRANT", "EXPIRE", "PREEMPT", "GRANT"]
    assert mysql_rows(mysql_url, "SELECT holder, token FROM fencemigrate_lease") == [("agent-B", 2)]


def test_preempt_kills_a_grant_stopped_inside_its_transaction_on_a_free_lease(
    make_project: MakeProject, mysql_url: str
) -> None:
    """agent-X's grant is stopped with SIGSTOP inside its transaction on a free lease (both named
    locks held): --preempt kills X's connection and is granted; X's grant never committed."""
    project = make_project(url=mysql_url)
    grant = 'leases.acquire(LeaseRequest("db/migrations", "agent-X", 3600000))'
    with paused_holder(stopped_lease_call(mysql_url, grant, "SELECT CONNECTION_ID()")) as connection_id:
        project.run_cli("lease", "acquire", "--holder", "agent-B", "--wait", "1s", timeout=30).check(4)
        granted = project.run_cli("lease", "acquire", "--holder", "agent-B", "--preempt", "--json", timeout=30).check(0)
    assert json.loads(granted.stdout)["lease"]["preempted_pids"] == [int(connection_id)]
    assert mysql_rows(mysql_url, "SELECT holder FROM fencemigrate_lease") == [("agent-B",)]

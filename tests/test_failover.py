"""Tokens across a PostgreSQL failover (issue 13), on a real primary and a streaming standby.

Every test gets a new pair (:mod:`support.replication`, about 3 s): a first grant replicates (or
only the fence schema, or nothing), then the primary's walsender is held, agent-A is granted the
lease on the primary, the primary stops immediately and the standby is promoted; agent-B is granted
the lease on the new primary. The control is plain Alembic behind a hand-rolled lease table
(bench/faults/control.py), which grants token 2 twice and lets A's stale write land after B's.
fencemigrate must never let two holders write under one token: A's write is FENCED (asynchronous
replication), or A is never told it was granted (synchronous replication: a crash, a cancelled wait,
``synchronous_commit=local``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from support.db import alembic_versions, query
from support.fence_rows import assert_fenced, fence_token, ledger, snapshot
from support.project import MakeProject, Project, Result, run_command, script_command, start_process, subprocess_env
from support.replication import StreamingPair, streaming_pair, wait_for
from support.zygote import Process

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from faults.backends import Backend  # noqa: E402

RESOURCE = "db/migrations"
#: The first token a grant can issue after a promotion: ``(0 + 1) << 32``, above all of timeline 1's.
NEXT_EPOCH = 1 << 32
NOT_CONFIRMED = "no synchronous standby confirmed it"
#: Seconds a command may take before the test fails (a grant that hangs must not hang the suite).
COMMAND_TIMEOUT = 60.0


@pytest.fixture
def pair() -> Iterator[StreamingPair]:
    """A new primary and its streaming standby, stopped and deleted after the test."""
    with streaming_pair() as servers:
        yield servers


@pytest.fixture
def chain(make_project: MakeProject, pair: StreamingPair) -> Project:
    """An Alembic project on the pair's primary with revisions r01..r03 (tables t01..t03)."""
    project = make_project(url=pair.url())
    project.add_chain(3)
    return project


# -- fencemigrate --------------------------------------------------------------------------------


def acquire(project: Project, holder: str, *args: str, env: Mapping[str, str] | None = None) -> Result:
    """``fencemigrate lease acquire --holder HOLDER ARGS``."""
    return project.run_cli("lease", "acquire", "--holder", holder, *args, env=env, timeout=COMMAND_TIMEOUT)


def granted_token(result: Result) -> int:
    """The token of a grant printed with ``--json`` (the command must have exited 0)."""
    return int(json.loads(result.check(0).stdout)["lease"]["token"])


def setup_grant(project: Project, pair: StreamingPair) -> None:
    """Token 1 applies r01 and is released; the standby has replayed all of it."""
    project.run_cli("upgrade", "r01", "--holder", "setup", timeout=COMMAND_TIMEOUT).check(0)
    pair.wait_replayed()
    assert ledger(pair.url())["r01"].applied_token == 1


def start_acquire(project: Project, holder: str, *args: str) -> Process:
    """``fencemigrate lease acquire`` in the background (its grant will wait for the standby)."""
    return start_process([*script_command("fencemigrate"), "lease", "acquire", "--holder", holder, *args], project.path)


def finish(process: Process, timeout: float = COMMAND_TIMEOUT) -> Result:
    """Wait (at most ``timeout``) for a background command; the test fails if it is still running."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"still running after {timeout:g}s:\n{stdout}{stderr}") from None
    argv = process.args
    return Result(tuple(map(str, argv)) if isinstance(argv, list) else (str(argv),), process.returncode, stdout, stderr)


def fail_over(project: Project, pair: StreamingPair) -> None:
    """Crash the primary, promote the standby and point the project at it."""
    pair.failover()
    project.set_url(pair.url())


def waiting_for_standby(url: str) -> list[int]:
    """Backend pids whose COMMIT waits for a synchronous standby (``wait_event = 'SyncRep'``)."""
    return [int(row[0]) for row in query(url, "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'")]


def wait_until_commit_waits(pair: StreamingPair, process: Process) -> int:
    """The pid of the backend whose commit waits for the standby, once there is one."""
    wait_for(
        lambda: bool(waiting_for_standby(pair.url())) or process.poll() is not None,
        "a grant waits for the synchronous standby",
    )
    assert process.poll() is None, f"the grant did not wait for the standby:\n{finish(process)}"
    (pid,) = waiting_for_standby(pair.url())
    return pid


def lease_holder(url: str) -> str | None:
    """The holder of the lease row (None: free)."""
    (row,) = query(url, "SELECT holder FROM fencemigrate.lease WHERE resource = %s", (RESOURCE,))
    return None if row[0] is None else str(row[0])


def assert_no_token(result: Result) -> None:
    """Nothing told the agent it was granted a token to write with."""
    assert not any(line.startswith("granted ") for line in result.stdout.splitlines()), result
    assert "write with" not in result.output, result


def assert_not_granted(result: Result) -> None:
    """Exit 4, the grant reported as unconfirmed, no token handed out."""
    result.check(4)
    assert NOT_CONFIRMED in result.stderr, result
    assert_no_token(result)


@pytest.mark.parametrize("replicated", ["a-grant", "a-grant-elsewhere", "the-fence-schema", "nothing"])
def test_a_grant_lost_in_a_failover_cannot_write(chain: Project, pair: StreamingPair, replicated: str) -> None:
    """Asynchronous replication: A's grant never reaches the standby, which is promoted; B's grant
    on the new primary is above every token the old primary issued, and A's writes under its token
    (an upgrade, a downgrade of B's revision) are FENCED and change nothing. What the standby had:
    a first grant (token 1, released); a first grant recorded on another incarnation (as in a
    database restored or created from a template), so that A's lost grant moved epochs itself;
    only the fence schema (A's grant was the resource's first); nothing (A's grant installed the
    fence schema too)."""
    if replicated.startswith("a-grant"):
        setup_grant(chain, pair)
    elif replicated == "the-fence-schema":
        chain.run_cli("install").check(0)
        pair.wait_replayed()
    if replicated == "a-grant-elsewhere":
        # As a grant on another incarnation would have left it (behind the lease guard, which lets
        # only a grant write it, as the database's own).
        query(
            pair.url(),
            "ALTER TABLE fencemigrate.agent_fence DISABLE TRIGGER agent_fence_no_unissued_token; "
            "UPDATE fencemigrate.agent_fence SET incarnation = 'elsewhere'; "
            "ALTER TABLE fencemigrate.agent_fence ENABLE TRIGGER agent_fence_no_unissued_token",
        )
        pair.wait_replayed()
    token_a = {"a-grant": 2, "a-grant-elsewhere": NEXT_EPOCH}.get(replicated, 1)
    pair.hold_wal()
    assert granted_token(acquire(chain, "agent-A", "--ttl", "5m", "--json")) == token_a
    fail_over(chain, pair)

    token_b = granted_token(acquire(chain, "agent-B", "--ttl", "5m", "--json"))
    assert token_b >= NEXT_EPOCH and token_b > token_a, f"token {token_b} was issued again after the failover"
    chain.run_cli("upgrade", "r02", "--token", str(token_b), "--holder", "agent-B").check(0)
    before = snapshot(pair.url())
    assert_fenced(chain.run_cli("upgrade", "r03", "--token", str(token_a), "--holder", "agent-A"), token_a, token_b)
    assert_fenced(chain.run_cli("downgrade", "r01", "--token", str(token_a), "--holder", "agent-A"), token_a, token_b)
    assert snapshot(pair.url()) == before
    assert alembic_versions(pair.url()) == ["r02"]
    first = (1, "setup") if replicated.startswith("a-grant") else (token_b, "agent-B")
    assert {rev: (entry.applied_token, entry.holder) for rev, entry in ledger(pair.url()).items()} == {
        "r01": first,
        "r02": (token_b, "agent-B"),
    }
    state = json.loads(chain.run_cli("state", "--json").check(0).stdout)
    assert [(row["revision"], row["applied_token"]) for row in state["ledger"]] == [("r01", first[0]), ("r02", token_b)]


def test_synchronous_a_crash_while_the_grant_waits_leaves_a_without_a_token(
    chain: Project, pair: StreamingPair
) -> None:
    """Synchronous replication: the primary stops while A's grant waits for the held standby; A is
    never told it was granted, and after the promotion B is granted and writes."""
    pair.make_synchronous()
    setup_grant(chain, pair)
    pair.hold_wal()
    agent_a = start_acquire(chain, "agent-A", "--ttl", "5m", "--wait", "1m")
    wait_until_commit_waits(pair, agent_a)
    fail_over(chain, pair)

    refused = finish(agent_a)
    assert refused.code != 0, refused
    assert_no_token(refused)
    token_b = granted_token(acquire(chain, "agent-B", "--ttl", "5m", "--json"))
    chain.run_cli("upgrade", "r02", "--token", str(token_b), "--holder", "agent-B").check(0)
    assert alembic_versions(pair.url()) == ["r02"]
    assert fence_token(pair.url()) == token_b


def test_synchronous_a_cancelled_grant_wait_is_not_granted(chain: Project, pair: StreamingPair) -> None:
    """pg_cancel_backend of A's backend while its grant waits for the standby ("already committed
    locally, but might not have been replicated"): exit 4, not granted, and the lease released."""
    pair.make_synchronous()
    setup_grant(chain, pair)
    pair.hold_wal()
    agent_a = start_acquire(chain, "agent-A", "--ttl", "5m", "--wait", "1m")
    pid = wait_until_commit_waits(pair, agent_a)
    assert query(pair.url(), "SELECT pg_cancel_backend(%s)", (pid,)) == [(True,)]

    assert_not_granted(finish(agent_a))
    assert lease_holder(pair.url()) is None


def test_synchronous_the_wait_bound_ends_an_unconfirmed_grant(chain: Project, pair: StreamingPair) -> None:
    """With the standby held, A's grant waits for it at most what is left of ``--wait`` (5 s at
    least), then is released and reported not granted (exit 4)."""
    pair.make_synchronous()
    setup_grant(chain, pair)
    pair.hold_wal()

    started = time.monotonic()
    assert_not_granted(finish(start_acquire(chain, "agent-A", "--ttl", "5m", "--wait", "1s"), timeout=30))
    assert time.monotonic() - started >= 5.0, "the grant gave up on the standby before 5 s"
    assert lease_holder(pair.url()) is None


@pytest.mark.parametrize(
    "options", ["-c synchronous_commit=local", "-c synchronous_commit=off", "-c client_min_messages=error"]
)
def test_a_session_setting_cannot_weaken_a_grant(chain: Project, pair: StreamingPair, options: str) -> None:
    """A session's ``synchronous_commit=local`` or ``off`` (PGOPTIONS) does not let a grant skip the
    standby, nor does ``client_min_messages=error`` hide that it was not confirmed: with the standby
    held, A is not granted within the bound."""
    pair.make_synchronous()
    setup_grant(chain, pair)
    pair.hold_wal()

    local = acquire(chain, "agent-A", "--ttl", "5m", env={"PGOPTIONS": options})
    assert_not_granted(local)
    assert lease_holder(pair.url()) is None


# -- the control: plain Alembic behind a hand-rolled lease -----------------------------------------


def control(project: Project, holder: str, *args: str, env: Mapping[str, str] | None = None) -> Result:
    """``python -m faults.control`` (bench/faults/control.py) for ``holder`` in the project."""
    argv = [
        sys.executable,
        "-m",
        "faults.control",
        "--url",
        project.url,
        "--resource",
        RESOURCE,
        "--holder",
        holder,
        *args,
    ]
    return run_command(argv, project.path, {"PYTHONPATH": str(BENCH), **(env or {})}, timeout=COMMAND_TIMEOUT)


def control_token(result: Result) -> int:
    """The token the control printed (``token N``)."""
    (line,) = [line for line in result.check(0).stdout.splitlines() if line.startswith("token ")]
    return int(line.split()[1])


def control_grants(url: str) -> list[tuple[int, str]]:
    """``(token, holder)`` of every grant the control recorded, oldest first."""
    return [
        (int(token), str(holder))
        for token, holder in query(url, "SELECT token, holder FROM faults_history WHERE kind = 'grant' ORDER BY id")
    ]


def start_control_grant(project: Project, holder: str) -> subprocess.Popen[str]:
    """The control's grant (``--acquire-only``) in the background."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faults.control",
            "--url",
            project.url,
            "--resource",
            RESOURCE,
            "--holder",
            holder,
            "--acquire-only",
        ],
        cwd=project.path,
        env=subprocess_env({"PYTHONPATH": str(BENCH)}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def control_chain(chain: Project, pair: StreamingPair) -> Project:
    """The chain with the control's tables, r01 applied under the control's token 1, replicated."""
    Backend("postgresql").prepare(pair.url(), RESOURCE)
    assert control_token(control(chain, "setup", "--command", "upgrade r01")) == 1
    pair.wait_replayed()
    return chain


def fail_over_and_write_twice(project: Project, pair: StreamingPair, token_a: int) -> None:
    """After A's grant of ``token_a``: failover, B's grant and r02, then A's r03 and its downgrade
    of B's r02 under ``token_a``, all going through: the double write."""
    fail_over(project, pair)
    token_b = control_token(control(project, "agent-B", "--command", "upgrade r02"))
    assert token_b == token_a == 2
    assert control_grants(pair.url()) == [(1, "setup"), (2, "agent-B")]  # A's grant is gone with the old primary
    control(project, "agent-A", "--token", str(token_a), "--command", "upgrade r03").check(0)
    assert alembic_versions(pair.url()) == ["r03"]
    control(project, "agent-A", "--token", str(token_a), "--command", "downgrade r01").check(0)
    assert alembic_versions(pair.url()) == ["r01"]


def test_control_grants_token_2_twice_across_a_failover(control_chain: Project, pair: StreamingPair) -> None:
    """Asynchronous replication, the control: A's grant is lost with the old primary, B is granted
    token 2 again, and A's stale upgrade and downgrade of B's revision both go through."""
    pair.hold_wal()
    token_a = control_token(control(control_chain, "agent-A", "--ttl", "300", "--acquire-only"))
    fail_over_and_write_twice(control_chain, pair, token_a)


def test_control_trusts_a_cancelled_synchronous_wait(control_chain: Project, pair: StreamingPair) -> None:
    """Synchronous replication, the control: A's grant wait cancelled by pg_cancel_backend still
    returns token 2 (committed locally only), and the failover gives token 2 to B as well."""
    pair.make_synchronous()
    pair.hold_wal()
    agent_a = start_control_grant(control_chain, "agent-A")
    pid = wait_until_commit_waits(pair, agent_a)
    assert query(pair.url(), "SELECT pg_cancel_backend(%s)", (pid,)) == [(True,)]
    token_a = control_token(finish(agent_a))
    fail_over_and_write_twice(control_chain, pair, token_a)


def test_control_trusts_synchronous_commit_local(control_chain: Project, pair: StreamingPair) -> None:
    """Synchronous replication, the control: with ``synchronous_commit=local`` A's grant returns
    token 2 at once although the standby never got it, and the failover gives token 2 to B too."""
    pair.make_synchronous()
    pair.hold_wal()
    local = control(
        control_chain, "agent-A", "--ttl", "300", "--acquire-only", env={"PGOPTIONS": "-c synchronous_commit=local"}
    )
    fail_over_and_write_twice(control_chain, pair, control_token(local))

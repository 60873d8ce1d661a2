"""The Redis lease backend against a real redis-server and a real PostgreSQL.

Redis issues the tokens (INCR) and judges expiry (PX); the database holds the fence, which every
grant advances, and the event log. The counter is seeded from the fence, so losing Redis's data
(FLUSHALL, a restart without persistence) never makes a token go backwards: the control shows the
design notes' plain INCR doing exactly that.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import redis
from sqlalchemy import Engine, create_engine
from support.db import connect, query
from support.fence_rows import FENCE_SCHEMA, RESOURCE, fence_installed, fence_token, ledger, stderr_lines
from support.paused import paused_holder, stopped_redis_grant
from support.project import Project
from support.redis_server import PrivateRedis

from fencemigrate.dialects.base import IN_FLIGHT
from fencemigrate.errors import DatabaseError, LeaseBusy, LeaseLost, TokensExhausted
from fencemigrate.leases import Grant, LeaseRequest, open_backend
from fencemigrate.leases.redis import RedisLeases

LEASE_KEY = f"fencemigrate:lease:{RESOURCE}"
TOKEN_KEY = f"fencemigrate:token:{RESOURCE}"
LAST_KEY = f"fencemigrate:last:{RESOURCE}"
LONG_TTL = 60_000
SHORT_TTL = 200  # expires by Redis's clock while another holder waits for it
LONG_WAIT = 30_000


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def leases(redis_url: str, engine: Engine) -> Iterator[RedisLeases]:
    backend = RedisLeases(redis_url, engine, FENCE_SCHEMA)
    yield backend
    backend.close()


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        yield client


def request(holder: str, ttl_ms: int = LONG_TTL, wait_ms: int = 0, preempt: bool = False) -> LeaseRequest:
    return LeaseRequest(RESOURCE, holder, ttl_ms, wait_ms, preempt)


def events(url: str) -> list[tuple[str, str | None, int | None]]:
    """(kind, holder, token) of every event of the resource, in order."""
    rows = query(
        url,
        f"SELECT kind, holder, token FROM {FENCE_SCHEMA}.fence_event WHERE resource = %s ORDER BY id",
        (RESOURCE,),
    )
    return [(str(kind), holder, None if token is None else int(token)) for kind, holder, token in rows]


def event_detail(url: str, kind: str) -> dict[str, Any]:
    """The detail of the last event of ``kind``."""
    rows = query(
        url, f"SELECT detail FROM {FENCE_SCHEMA}.fence_event WHERE kind = %s ORDER BY id DESC LIMIT 1", (kind,)
    )
    return dict(json.loads(rows[0][0]))


def claim(url: str, token: int) -> None:
    """A write under ``token``: the fence schema's claim(), committed."""
    query(url, f"SELECT {FENCE_SCHEMA}.claim(%s, %s)", (RESOURCE, token))


def lock_waits(url: str, locktype: str) -> int:
    """How many sessions wait for a lock of ``locktype`` now."""
    return int(query(url, "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = %s", (locktype,))[0][0])


def until(condition: Callable[[], bool], give_up_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail (rather than hang) if it never does."""
    give_up = time.monotonic() + give_up_s
    while not condition():
        assert time.monotonic() < give_up, "condition never held"
        time.sleep(0.01)


def key_gone(client: redis.Redis) -> Callable[[], bool]:
    """Has Redis expired (or deleted) the lease key? Redis's clock decides, not ours."""
    return lambda: not client.exists(LEASE_KEY)


def plain_incr_grant(client: redis.Redis, holder: str) -> int:
    """The design notes' lease without the seed: SET NX PX, then a bare INCR of the counter."""
    assert client.set("control:lease", holder, nx=True, px=LONG_TTL)
    token = int(client.incr("control:token"))
    client.delete("control:lease")
    return token


# -- tokens -----------------------------------------------------------------------------------


def test_tokens_strictly_increase_and_each_grant_advances_the_fence(leases: RedisLeases, pg_url: str) -> None:
    tokens = []
    # agent-B asks again while it holds the lease: a new grant, with a new token
    for holder, then_release in (("agent-A", True), ("agent-B", False), ("agent-B", True), ("agent-C", True)):
        grant = leases.acquire(request(holder))
        assert grant.lease.holder == holder
        assert fence_token(pg_url) == grant.token
        tokens.append(grant.token)
        if then_release:
            leases.release(RESOURCE, holder, grant.token)
    assert tokens == [1, 2, 3, 4]


def test_flushall_between_grants_still_issues_a_token_above_the_fence(
    leases: RedisLeases, client: redis.Redis, pg_url: str
) -> None:
    for holder in ("agent-A", "agent-B", "agent-C"):
        leases.release(RESOURCE, holder, leases.acquire(request(holder)).token)
    assert fence_token(pg_url) == 3

    client.flushall()
    assert client.get(TOKEN_KEY) is None

    grant = leases.acquire(request("agent-D"))
    assert grant.token == 4
    assert fence_token(pg_url) == 4
    assert client.get(TOKEN_KEY) == "4"
    assert event_detail(pg_url, "GRANT") == {
        "counter_raised_to_fence_token": 3,
        "lease_service": "redis",
        "ttl_ms": LONG_TTL,
    }


def test_control_a_plain_incr_counter_goes_backwards_after_flushall(
    client: redis.Redis, pg_url: str, leases: RedisLeases
) -> None:
    for holder in ("agent-A", "agent-B", "agent-C"):
        claim(pg_url, plain_incr_grant(client, holder))
    assert fence_token(pg_url) == 3

    client.flushall()
    stale = plain_incr_grant(client, "agent-D")

    assert stale == 1 < fence_token(pg_url)  # issued again: the fence has seen 1, 2 and 3
    with pytest.raises(psycopg.Error) as rejected:
        claim(pg_url, stale)
    assert rejected.value.sqlstate == "FM001"


def test_tokens_above_two_to_the_53_stay_exact(leases: RedisLeases, client: redis.Redis, pg_url: str) -> None:
    claim(pg_url, 2**62 - 2)  # e.g. a token from the team's previous lease service

    first = leases.acquire(request("agent-A"))
    second = leases.acquire(request("agent-A"))

    assert (first.token, second.token) == (2**62 - 1, 2**62)
    assert client.get(TOKEN_KEY) == str(2**62)
    assert fence_token(pg_url) == 2**62
    with pytest.raises(TokensExhausted):  # 2**62 is the largest token: refused, never an overflow
        leases.acquire(request("agent-A"))
    assert fence_token(pg_url) == 2**62


# -- busy, lost, expiry -------------------------------------------------------------------------


def test_a_live_holder_makes_the_lease_busy_and_nothing_changes(
    leases: RedisLeases, client: redis.Redis, pg_url: str
) -> None:
    leases.acquire(request("agent-A"))

    with pytest.raises(LeaseBusy) as busy:
        leases.acquire(request("agent-B", wait_ms=100))

    assert busy.value.exit_status == 4
    assert busy.value.holder == "agent-A"
    assert busy.value.reason.startswith("held by agent-A (token 1) until ")
    assert client.get(LEASE_KEY) == "1:agent-A"
    assert fence_token(pg_url) == 1
    assert events(pg_url) == [("GRANT", "agent-A", 1)]


def test_expiry_is_redis_s_and_a_stale_holder_s_renew_and_release_are_lost(leases: RedisLeases, pg_url: str) -> None:
    leases.acquire(request("agent-A", ttl_ms=SHORT_TTL))

    grant = leases.acquire(request("agent-B", wait_ms=LONG_WAIT))  # polls until Redis expires A's key

    assert (grant.token, grant.previous_holder) == (2, "agent-A")
    for stale_call in (
        lambda: leases.renew(RESOURCE, "agent-A", 1, LONG_TTL),
        lambda: leases.release(RESOURCE, "agent-A", 1),
    ):
        with pytest.raises(LeaseLost) as lost:
            stale_call()
        assert lost.value.exit_status == 3
        assert lost.value.reason == "it has been granted to agent-B with token 2"
    assert leases.status(RESOURCE).live_holder == "agent-B"
    assert events(pg_url) == [
        ("GRANT", "agent-A", 1),
        ("EXPIRE", "agent-A", 1),
        ("GRANT", "agent-B", 2),
        ("LOST", "agent-A", 1),
        ("LOST", "agent-A", 1),
    ]
    expired_at, granted_at = query(
        pg_url, f"SELECT at FROM {FENCE_SCHEMA}.fence_event WHERE kind IN ('EXPIRE', 'GRANT') ORDER BY id"
    )[1:]
    assert expired_at[0] <= granted_at[0]


def test_the_grant_fences_the_old_holder_before_the_new_one_writes(leases: RedisLeases, pg_url: str) -> None:
    old = leases.acquire(request("agent-A"))
    claim(pg_url, old.token)
    leases.release(RESOURCE, "agent-A", old.token)

    new = leases.acquire(request("agent-B"))

    with pytest.raises(psycopg.Error) as fenced:
        claim(pg_url, old.token)
    assert fenced.value.sqlstate == "FM001"
    claim(pg_url, new.token)
    assert fence_token(pg_url) == new.token == 2


def test_renew_extends_the_lease_on_redis_s_clock(leases: RedisLeases, client: redis.Redis, pg_url: str) -> None:
    grant = leases.acquire(request("agent-A", ttl_ms=5_000))

    renewed = leases.renew(RESOURCE, "agent-A", grant.token, LONG_TTL)

    assert renewed.token == grant.token and not renewed.renewed_after_expiry
    assert 5_000 < client.pttl(LEASE_KEY) <= LONG_TTL
    assert renewed.lease.ttl_ms == LONG_TTL
    assert events(pg_url)[-1] == ("RENEW", "agent-A", 1)


def test_an_expired_lease_nobody_took_can_still_be_renewed_by_its_holder(
    leases: RedisLeases, client: redis.Redis
) -> None:
    grant = leases.acquire(request("agent-A", ttl_ms=SHORT_TTL))
    until(key_gone(client))
    assert leases.status(RESOURCE).expired

    renewed = leases.renew(RESOURCE, "agent-A", grant.token, LONG_TTL)

    assert renewed.renewed_after_expiry and renewed.token == grant.token
    assert client.get(LEASE_KEY) == "1:agent-A"


def test_release_frees_the_lease_and_a_second_release_is_lost(leases: RedisLeases, pg_url: str) -> None:
    grant = leases.acquire(request("agent-A"))

    status = leases.release(RESOURCE, "agent-A", grant.token)

    assert (status.holder, status.token, status.fence_token) == (None, 1, 1)
    with pytest.raises(LeaseLost) as lost:
        leases.release(RESOURCE, "agent-A", grant.token)
    assert lost.value.reason == "the lease is not held"
    assert [kind for kind, _, _ in events(pg_url)] == ["GRANT", "RELEASE", "LOST"]


def test_a_renew_after_redis_lost_its_data_is_lost(leases: RedisLeases, client: redis.Redis) -> None:
    grant = leases.acquire(request("agent-A"))
    client.flushall()

    with pytest.raises(LeaseLost) as lost:
        leases.renew(RESOURCE, "agent-A", grant.token, LONG_TTL)

    assert lost.value.reason == "Redis has no record of the lease"


def test_status_reads_redis_and_the_fence(leases: RedisLeases) -> None:
    assert leases.status(RESOURCE).holder is None
    grant = leases.acquire(request("agent-A"))

    status = leases.status(RESOURCE)

    assert (status.holder, status.token, status.fence_token, status.ttl_ms) == ("agent-A", 1, 1, LONG_TTL)
    assert status.live_holder == "agent-A" and not status.expired
    assert status.granted_at == grant.lease.granted_at
    assert status.expires_at is not None and status.granted_at is not None
    assert status.granted_at < status.expires_at


# -- the database half --------------------------------------------------------------------------


def test_an_in_flight_migration_makes_the_grant_busy_and_the_redis_lease_is_given_back(
    leases: RedisLeases, client: redis.Redis, pg_url: str
) -> None:
    old = leases.acquire(request("agent-A"))
    leases.release(RESOURCE, "agent-A", old.token)
    with connect(pg_url) as in_flight:
        in_flight.autocommit = False
        in_flight.execute(f"SELECT {FENCE_SCHEMA}.claim(%s, %s)", (RESOURCE, old.token))

        with pytest.raises(LeaseBusy) as busy:
            leases.acquire(request("agent-B", wait_ms=100))

        assert busy.value.reason.startswith(f"{IN_FLIGHT} (held by pid "), busy.value.reason
        assert busy.value.reason.endswith("); waited 100ms"), busy.value.reason
        assert client.get(LEASE_KEY) is None
        in_flight.rollback()
    assert fence_token(pg_url) == 1
    assert leases.acquire(request("agent-B")).token == 2


def test_preempt_cancels_the_stale_in_flight_migration(leases: RedisLeases, pg_url: str) -> None:
    old = leases.acquire(request("agent-A"))
    leases.release(RESOURCE, "agent-A", old.token)
    with connect(pg_url) as in_flight:
        in_flight.autocommit = False
        in_flight.execute(f"SELECT {FENCE_SCHEMA}.claim(%s, %s)", (RESOURCE, old.token))
        in_flight.execute("CREATE TABLE stale_write (id int)")

        grant = leases.acquire(request("agent-B", preempt=True))

        with pytest.raises(psycopg.OperationalError):
            in_flight.execute("SELECT 1")
    assert grant.token == 2 and len(grant.preempted) == 1
    assert not query(pg_url, "SELECT 1 FROM pg_tables WHERE tablename = 'stale_write'")
    assert [kind for kind, _, _ in events(pg_url)][-2:] == ["PREEMPT", "GRANT"]


def test_a_grant_whose_key_expired_during_the_fence_wait_yields_to_the_holder_that_took_it(
    leases: RedisLeases, redis_url: str, engine: Engine, client: redis.Redis, pg_url: str
) -> None:
    old = leases.acquire(request("agent-A"))
    leases.release(RESOURCE, "agent-A", old.token)
    other = RedisLeases(redis_url, engine, FENCE_SCHEMA)
    grants: dict[str, Grant] = {}
    with ThreadPoolExecutor(2) as pool, connect(pg_url) as in_flight:
        in_flight.autocommit = False
        in_flight.execute(f"SELECT {FENCE_SCHEMA}.claim(%s, %s)", (RESOURCE, old.token))
        # C takes the key with a short TTL, then waits for the fence behind the in-flight migration.
        # (A grant waits for every in-flight claim on the resource's claim advisory lock.)
        c_grant = pool.submit(leases.acquire, request("agent-C", ttl_ms=SHORT_TTL, wait_ms=LONG_WAIT))
        until(lambda: lock_waits(pg_url, "advisory") == 1)
        until(key_gone(client))  # Redis expires C's key while C waits
        # D takes the free key, then waits behind C's grant, which holds the grant lock.
        d_grant = pool.submit(other.acquire, request("agent-D", wait_ms=LONG_WAIT))
        until(lambda: lock_waits(pg_url, "advisory") == 2)
        in_flight.rollback()  # the migration ends: C finds D's key, gives way, and D is granted
        grants["agent-D"] = d_grant.result()
        other.release(RESOURCE, "agent-D", grants["agent-D"].token)
        grants["agent-C"] = c_grant.result()
    other.close()
    assert (grants["agent-D"].token, grants["agent-C"].token) == (2, 3)
    assert [(kind, holder) for kind, holder, _ in events(pg_url)][-3:] == [
        ("GRANT", "agent-D"),
        ("RELEASE", "agent-D"),
        ("GRANT", "agent-C"),
    ]


def test_opening_installs_the_fence_schema(redis_url: str, engine: Engine, pg_url: str) -> None:
    assert not fence_installed(pg_url)
    open_backend(engine, FENCE_SCHEMA, redis_url).close()
    assert fence_installed(pg_url)


def test_an_unreachable_redis_is_a_clear_error_and_the_database_is_untouched(engine: Engine, pg_url: str) -> None:
    with PrivateRedis() as server:
        url = server.url
    with pytest.raises(DatabaseError) as failed:
        RedisLeases(url.replace("redis://", "redis://user:secret@"), engine, FENCE_SCHEMA)
    assert str(failed.value).startswith(f"lease service redis://user:***@127.0.0.1:{server.port}/0 failed: ")
    assert "secret" not in str(failed.value)
    assert not fence_installed(pg_url)


# -- the command line ---------------------------------------------------------------------------


def test_a_grant_paused_inside_its_transaction_is_preempted_once_its_redis_lease_expired(
    project: Project, redis_url: str, pg_url: str, client: redis.Redis
) -> None:
    """agent-X's Redis grant is stopped with SIGSTOP inside its fence database transaction (the
    grant lock held). While X's Redis key lives, --preempt is busy and kills nobody; once it has
    expired a grant with --wait 2s is busy within about the wait, and --preempt ends X's stuck
    transaction and is granted."""

    def acquire(*args: str) -> Any:
        return project.run_cli("lease", "acquire", "--holder", "agent-B", "--lease-url", redis_url, *args, timeout=60)

    with paused_holder(stopped_redis_grant(pg_url, redis_url, "agent-X", 10_000)) as pid:
        live = acquire("--preempt").check(4)
        assert "agent-X" in live.stderr
        assert query(pg_url, f"SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}") == [(1,)]
        until(key_gone(client))
        started = time.monotonic()
        acquire("--wait", "2s").check(4)
        assert time.monotonic() - started < 10
        payload = json.loads(acquire("--wait", "2s", "--preempt", "--json").check(0).stdout)
        assert payload["lease"]["preempted_pids"] == [int(pid)]
    assert events(pg_url) == [
        ("EXPIRE", "agent-X", 1),
        ("PREEMPT", "agent-B", 2),
        ("GRANT", "agent-B", 2),
    ]
    assert fence_token(pg_url) == payload["lease"]["token"]


def test_cli_acquire_busy_and_a_stale_renew(project: Project, redis_url: str) -> None:
    def lease(*args: str) -> Any:
        return project.run_cli("lease", *args, "--lease-url", redis_url, "--json")

    granted = lease("acquire", "--holder", "agent-A").check(0)
    assert json.loads(granted.stdout)["lease"]["token"] == 1

    busy = lease("acquire", "--holder", "agent-B").check(4)
    assert json.loads(busy.stdout)["status"] == "busy"
    assert json.loads(busy.stdout)["holder"] == "agent-A"

    lease("renew", "--holder", "agent-A", "--token", "1", "--ttl", "200ms").check(0)
    taken = lease("acquire", "--holder", "agent-B", "--wait", "30s").check(0)  # once Redis expires A's key
    assert json.loads(taken.stdout)["lease"]["token"] == 2
    status = json.loads(project.run_cli("lease", "status", "--lease-url", redis_url, "--json").check(0).stdout)
    assert {key: status["lease"][key] for key in ("holder", "token", "fence_token", "expired")} == {
        "holder": "agent-B",
        "token": 2,
        "fence_token": 2,
        "expired": False,
    }

    lost = lease("renew", "--holder", "agent-A", "--token", "1").check(3)
    assert json.loads(lost.stdout)["status"] == "lost"
    assert json.loads(lost.stdout)["reason"] == "it has been granted to agent-B with token 2"


def test_cli_upgrade_takes_and_releases_a_redis_lease(project: Project, redis_url: str, pg_url: str) -> None:
    project.add_revision("0001", None, "CREATE TABLE invoice (id int)", "DROP TABLE invoice")

    project.run_cli("upgrade", "head", "--holder", "agent-B", "--lease-url", redis_url).check(0)

    assert ledger(pg_url)["0001"].applied_token == 1
    assert query(pg_url, "SELECT count(*) FROM invoice") == [(0,)]
    assert [kind for kind, _, _ in events(pg_url)] == ["GRANT", "APPLY", "RELEASE"]
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        assert client.get(LEASE_KEY) is None
        assert client.get(TOKEN_KEY) == "1"


def test_cli_takes_the_lease_url_from_the_config(project: Project, redis_url: str, pg_url: str) -> None:
    project.set_ini_option("fencemigrate_lease_url", redis_url)
    project.add_revision("0001", None, "CREATE TABLE invoice (id int)", "DROP TABLE invoice")

    project.run_cli("upgrade", "head", "--holder", "agent-B").check(0)

    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        assert client.get(TOKEN_KEY) == "1"
    assert query(pg_url, f"SELECT count(*) FROM {FENCE_SCHEMA}.lease") == [(0,)]  # not the built-in service


def test_cli_bad_lease_url_is_a_usage_error_and_the_database_is_untouched(project: Project, pg_url: str) -> None:
    bad = project.run_cli("lease", "status", "--lease-url", "redis://127.0.0.1:notaport/0", "--json").check(2)

    assert json.loads(bad.stdout)["message"].startswith("invalid lease backend URL 'redis://127.0.0.1:notaport/0': ")
    assert not fence_installed(pg_url)


def test_a_paused_redis_answers_no_later_than_wait(project: Project, pg_url: str) -> None:
    """A Redis stopped with SIGSTOP accepts connections and answers nothing: `lease acquire --wait
    2s` gives up after about 2 s, `lease renew` after 5 s, each with one clear line (exit 1),
    instead of waiting for the client's 30-second reply timeout; the database is untouched."""
    with PrivateRedis() as server:
        project.run_cli("lease", "acquire", "--holder", "agent-A", "--lease-url", server.url).check(0)
        logged = query(pg_url, "SELECT kind FROM fencemigrate.fence_event ORDER BY id")
        with server.paused():
            started = time.monotonic()
            acquire = project.run_cli(
                "lease", "acquire", "--holder", "agent-B", "--wait", "2s", "--lease-url", server.url, timeout=25
            ).check(1)
            assert time.monotonic() - started < 20
            renew = project.run_cli(
                "lease", "renew", "--holder", "agent-A", "--lease-url", server.url, timeout=25
            ).check(1)
        no_answer = f"fencemigrate: error: lease service {server.url} did not answer within"
        assert stderr_lines(acquire.stderr) == [f"{no_answer} 2s (paused, overloaded or unreachable); try again later"]
        assert stderr_lines(renew.stderr) == [f"{no_answer} 5s (paused, overloaded or unreachable); try again later"]
        assert query(pg_url, "SELECT kind FROM fencemigrate.fence_event ORDER BY id") == logged

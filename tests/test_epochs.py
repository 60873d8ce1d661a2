"""Token epochs: a grant on another incarnation of the database (or of Redis) than the resource's
last grant issues the first token of the next epoch, so no token is issued twice across a failover.

A real promotion of a standby is tests/test_failover.py's; here the recorded incarnation is made to
differ by SQL (as the rows a promoted standby, a restore or a point-in-time recovery bring back
record the old incarnation), and Redis is restarted for real.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, create_engine
from support.db import execute, query
from support.fence_rows import FENCE_SCHEMA, RESOURCE, fence_token, stderr_lines
from support.project import Project
from support.redis_server import PrivateRedis

from fencemigrate.errors import TokensExhausted
from fencemigrate.leases import LeaseRequest
from fencemigrate.leases.redis import RedisLeases

EPOCH = 2**32
ELSEWHERE = "7000000000000000000/1/1"  # a system identifier, timeline and database OID of another incarnation


def grant(project: Project, holder: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(
        project.run_cli("lease", "acquire", "--holder", holder, "--ttl", "5m", "--json").check(0).stdout
    )
    return payload


def release(project: Project, holder: str, token: int) -> None:
    project.run_cli("lease", "release", "--holder", holder, "--token", str(token)).check(0)


def elsewhere(url: str) -> None:
    """Record another incarnation on the fence row, as a grant there would have (behind the lease
    guard, which lets only a grant write it, as the database's own)."""
    execute(url, f"ALTER TABLE {FENCE_SCHEMA}.agent_fence DISABLE TRIGGER agent_fence_no_unissued_token")
    execute(url, f"UPDATE {FENCE_SCHEMA}.agent_fence SET incarnation = %s", (ELSEWHERE,))
    execute(url, f"ALTER TABLE {FENCE_SCHEMA}.agent_fence ENABLE TRIGGER agent_fence_no_unissued_token")


def recorded_incarnation(url: str) -> str | None:
    rows = query(url, f"SELECT incarnation FROM {FENCE_SCHEMA}.agent_fence WHERE resource = %s", (RESOURCE,))
    return None if rows[0][0] is None else str(rows[0][0])


def current_incarnation(url: str) -> str:
    sql = (
        "SELECT format('%%s/%%s/%%s', (pg_control_system()).system_identifier, "
        "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint, "
        "(SELECT oid FROM pg_database WHERE datname = current_database()))"
    )
    return str(query(url, sql, ())[0][0])


def grant_detail(url: str, holder: str) -> dict[str, Any]:
    rows = query(
        url,
        f"SELECT detail FROM {FENCE_SCHEMA}.fence_event WHERE kind = 'GRANT' AND holder = %s ORDER BY id DESC",
        (holder,),
    )
    detail = rows[0][0]
    return detail if isinstance(detail, dict) else json.loads(detail)


def test_a_grant_records_the_incarnation_and_the_same_incarnation_keeps_counting(project: Project, pg_url: str) -> None:
    """Control: on one incarnation tokens go 1, 2; the fence row records where they were issued."""
    first = grant(project, "agent-A")["lease"]
    release(project, "agent-A", first["token"])
    second = grant(project, "agent-B")

    assert (first["token"], second["lease"]["token"]) == (1, 2)
    assert second["lease"]["new_epoch"] is False
    assert recorded_incarnation(pg_url) == current_incarnation(pg_url)
    assert "new_epoch" not in grant_detail(pg_url, "agent-B")


def test_a_grant_on_another_incarnation_starts_the_next_epoch(project: Project, pg_url: str) -> None:
    """The rows say the last grant ran elsewhere: the next token is 2^32, above anything the lost
    history could have issued; the stale holder's token is FENCED; later grants count on from 2^32."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    stale = grant(project, "agent-A")["lease"]["token"]
    elsewhere(pg_url)

    result = project.run_cli("lease", "acquire", "--holder", "agent-B", "--wait", "0s", "--ttl", "1s")
    assert result.code == 4  # agent-A's lease is live: an epoch changes tokens, not who holds the lease
    execute(pg_url, f"UPDATE {FENCE_SCHEMA}.lease SET expires_at = granted_at", ())  # as if its TTL ran out
    text = project.run_cli("lease", "acquire", "--holder", "agent-B", "--ttl", "5m").check(0).stdout

    assert f"to agent-B: token {EPOCH}," in text
    assert "  new epoch: the database (or Redis) is not the one the last grant ran on" in text
    assert fence_token(pg_url) == EPOCH
    assert recorded_incarnation(pg_url) == current_incarnation(pg_url)
    assert grant_detail(pg_url, "agent-B")["new_epoch"] == {
        "last_grant_on": ELSEWHERE,
        "now_on": current_incarnation(pg_url),
    }
    fenced = project.run_cli("upgrade", "head", "--token", str(stale), "--holder", "agent-A")
    assert fenced.code == 3, fenced
    assert stderr_lines(fenced.stderr)[0].startswith("FENCED"), fenced.stderr
    release(project, "agent-B", EPOCH)
    assert grant(project, "agent-C")["lease"]["token"] == EPOCH + 1


def test_external_tokens_never_move_epochs(project: Project, pg_url: str) -> None:
    """A resource fed by --token records no incarnation: its tokens are its source's."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "harness").check(0)
    assert recorded_incarnation(pg_url) is None
    assert grant(project, "agent-A")["lease"]["token"] == 6  # taken over: no incarnation recorded before


def test_the_last_epoch_starts_at_the_largest_token(project: Project, pg_url: str) -> None:
    """A change of incarnation in the last epoch issues 2^62, the largest token; the grant after it
    is refused cleanly (TokensExhausted, exit 1), never an overflow."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--token", str(2**62 - 3), "--holder", "harness").check(0)
    release(project, "agent-A", grant(project, "agent-A")["lease"]["token"])
    elsewhere(pg_url)

    assert grant(project, "agent-B")["lease"]["token"] == 2**62
    release(project, "agent-B", 2**62)
    refused = project.run_cli("lease", "acquire", "--holder", "agent-C")
    assert refused.code == 1, refused
    assert "no token is left for db/migrations" in refused.stderr
    assert fence_token(pg_url) == 2**62


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()


def test_a_redis_restart_starts_the_next_epoch_above_both_sides(engine: Engine, pg_url: str) -> None:
    """Redis restarted (a new run id; its counter lost): the next token is the next epoch's first,
    above both the fence and whatever Redis issued before; the next grant counts on from it."""
    request = LeaseRequest(RESOURCE, "agent-A", 60_000)
    with PrivateRedis() as server:
        backend = RedisLeases(server.url, engine, FENCE_SCHEMA)
        try:
            first = backend.acquire(request)
            backend.release(RESOURCE, "agent-A", first.token)
            server.restart()
            with redis.Redis.from_url(server.url) as fresh:
                assert fresh.dbsize() == 0  # the counter is gone too
            second = backend.acquire(request)
            backend.release(RESOURCE, "agent-A", second.token)
            third = backend.acquire(request)
        finally:
            backend.close()
    assert (first.token, second.token, third.token) == (1, EPOCH, EPOCH + 1)
    assert (first.new_epoch, second.new_epoch, third.new_epoch) == (False, True, False)
    assert fence_token(pg_url) == EPOCH + 1
    assert str(recorded_incarnation(pg_url)).startswith(current_incarnation(pg_url) + "+redis:")


def test_a_redis_restart_in_the_last_epoch_issues_the_largest_token(engine: Engine, pg_url: str) -> None:
    """The Redis path's floor at the top of the token domain: 2^62, then TokensExhausted."""
    request = LeaseRequest(RESOURCE, "agent-A", 60_000)
    with PrivateRedis() as server:
        backend = RedisLeases(server.url, engine, FENCE_SCHEMA)
        try:
            execute(
                pg_url,
                f"INSERT INTO {FENCE_SCHEMA}.agent_fence (resource, token) VALUES (%s, %s)",
                (RESOURCE, 2**62 - 3),
            )
            first = backend.acquire(request)
            server.restart()
            second = backend.acquire(request)
            with pytest.raises(TokensExhausted):
                backend.acquire(request)
        finally:
            backend.close()
    assert (first.token, second.token) == (2**62 - 2, 2**62)
    assert fence_token(pg_url) == 2**62

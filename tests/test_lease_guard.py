"""Direct SQL on the fence and lease tables cannot forge a grant or an unissued token (fence schema 0.5).

The role that runs migrations may write agent_fence and lease (it owns them with one role; with
two roles, ``install --grant-to``, it has INSERT and UPDATE on them). Three attacks while agent-A
holds a live lease with token 1, each followed by the forged write it was for:

1. detach by hand (``token_source = 'external'``), then ``--token 999``;
2. raise the fence above the last issued token (50), then ``--token 50``;
3. steal the lease row (another holder, token 2), raise the fence to 2, then ``--token 2``.

The guard triggers refuse each statement (SQLSTATE FM006 on PostgreSQL and MySQL, ``lease guard:``
on every database), nothing changes, the forged write is still FENCED and agent-A still writes.
Controls: the same SQL once no lease is live (expired) is what ``lease detach`` or ``lease acquire``
would do, and goes through; raising the fence of a detached resource is what a claim does.

On PostgreSQL a fence whose tokens come from Redis is held to the last token a Redis grant recorded
(``redis_grant``), also for the role that owns the fence (one role).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from support.db import execute, query
from support.fence_rows import stderr_lines
from support.mysql_server import mysql_rows
from support.pg import PgServer
from support.pg_roles import MakeRole, role_url, two_roles
from support.project import MakeProject, Project

DETACH = "UPDATE {fence} SET token_source = 'external'"
RAISE = "UPDATE {fence} SET token = 50"
STEAL = "UPDATE {lease} SET holder = 'mallory', token = token + 1, expires_at = {in_an_hour}"
RAISE_TO_STOLEN = "UPDATE {fence} SET token = 2"

LIVE_DETACH = "its fence cannot leave the lease service while that lease is live"
NEVER_ISSUED = "above the last token the lease service issued"
LIVE_STEAL = "only a grant gives it to another holder, once it is released or has expired"
REDIS_NEVER_ISSUED = (
    "lease guard: this fence token is above the last token Redis issued (recorded by its grant): it was never issued"
)
MAX_TOKEN = 4611686018427387904


@dataclass(frozen=True)
class Target:
    """A project on one database, and direct SQL on its fence tables as the migration role."""

    project: Project
    run: Callable[[str], None]
    rows: Callable[[], Any]
    error: type[BaseException]
    names: dict[str, str]

    def sql(self, template: str) -> str:
        return template.format(**self.names)


def pg_target(project: Project, url: str) -> Target:
    return Target(
        project,
        lambda sql: execute(url, sql),
        lambda: (
            query(url, "SELECT resource, token, token_source FROM fencemigrate.agent_fence ORDER BY 1"),
            query(url, "SELECT resource, token, holder, expires_at FROM fencemigrate.lease ORDER BY 1"),
        ),
        psycopg.Error,
        {"fence": "fencemigrate.agent_fence", "lease": "fencemigrate.lease", "in_an_hour": "now() + interval '1 hour'"},
    )


def sqlite_target(project: Project, url: str) -> Target:
    database = Path(url.removeprefix("sqlite:///"))

    def run(sql: str) -> None:
        with closing(sqlite3.connect(database, isolation_level=None)) as connection:
            connection.execute(sql)

    def rows() -> Any:
        with closing(sqlite3.connect(database, isolation_level=None)) as connection:
            return (
                connection.execute("SELECT resource, token, token_source FROM fencemigrate_agent_fence").fetchall(),
                connection.execute("SELECT resource, token, holder, expires_at FROM fencemigrate_lease").fetchall(),
            )

    return Target(
        project,
        run,
        rows,
        sqlite3.DatabaseError,
        {
            "fence": "fencemigrate_agent_fence",
            "lease": "fencemigrate_lease",
            "in_an_hour": "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+1 hour')",
        },
    )


def mysql_target(project: Project, url: str) -> Target:
    def run(sql: str) -> None:
        mysql_rows(url, sql)

    return Target(
        project,
        run,
        lambda: (
            mysql_rows(url, "SELECT resource, token, token_source FROM fencemigrate_agent_fence"),
            mysql_rows(url, "SELECT resource, token, holder, expires_at FROM fencemigrate_lease"),
        ),
        pymysql.err.MySQLError,
        {
            "fence": "fencemigrate_agent_fence",
            "lease": "fencemigrate_lease",
            "in_an_hour": "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
        },
    )


def add_revisions(project: Project) -> None:
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("0002", "0001", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")


def leased_to_agent_a(target: Target, ttl: str = "1h") -> None:
    """agent-A is granted token 1 and applies 0001 with it."""
    add_revisions(target.project)
    target.project.run_cli("lease", "acquire", "--holder", "agent-A", "--ttl", ttl).check(0)
    target.project.run_cli("upgrade", "0001", "--token", "1", "--holder", "agent-A").check(0)


def assert_refused(target: Target, template: str, refusal: str) -> None:
    """The statement is refused with ``refusal`` and changes nothing."""
    before = target.rows()
    with pytest.raises(target.error) as raised:
        target.run(target.sql(template))
    assert "lease guard: " in str(raised.value) and refusal in str(raised.value), raised.value
    if isinstance(raised.value, psycopg.Error):
        assert raised.value.sqlstate == "FM006"
    if isinstance(raised.value, pymysql.err.MySQLError):
        assert raised.value.args[0] == 1644  # SIGNAL SQLSTATE 'FM006'
    assert target.rows() == before


def assert_still_fenced(target: Target, token: str) -> None:
    """The forged write is FENCED (never issued), and agent-A's token 1 still writes."""
    before = target.rows()
    forged = target.project.run_cli("upgrade", "head", "--token", token, "--holder", "mallory").check(3)
    assert stderr_lines(forged.stderr)[1] == (
        f"Rejected for token {token}: token {token} was never issued by the lease service for db/migrations "
        "(the last token it issued is 1)."
    )
    assert target.rows() == before
    target.project.run_cli("upgrade", "head", "--token", "1", "--holder", "agent-A").check(0)


def attack(target: Target, which: str) -> None:
    leased_to_agent_a(target)
    if which == "detach":
        assert_refused(target, DETACH, LIVE_DETACH)
        assert_still_fenced(target, "999")
    elif which == "raise":
        assert_refused(target, RAISE, NEVER_ISSUED)
        assert_still_fenced(target, "50")
    else:
        assert_refused(target, STEAL, LIVE_STEAL)
        assert_refused(target, RAISE_TO_STOLEN, NEVER_ISSUED)
        assert_still_fenced(target, "2")


def control(target: Target, which: str) -> None:
    """The same SQL once agent-A's lease has expired (raise: once the resource is detached) goes
    through, and so does the write it was for."""
    leased_to_agent_a(target, ttl="1s")
    time.sleep(1.5)
    if which == "detach":
        target.run(target.sql(DETACH))
        token = "999"
    elif which == "raise":
        target.project.run_cli("lease", "detach").check(0)
        target.run(target.sql(RAISE))
        token = "50"
    else:
        target.run(target.sql(STEAL))
        target.run(target.sql(RAISE_TO_STOLEN))
        token = "2"
    target.project.run_cli("upgrade", "head", "--token", token, "--holder", "mallory").check(0)


ATTACKS = ["detach", "raise", "steal"]


@pytest.mark.parametrize("which", ATTACKS)
def test_pg_one_role(
    which: str, make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    url = role_url(pg_server, pg_dbname, make_role())
    attack(pg_target(make_project(url=url), url), which)


@pytest.mark.parametrize("which", ATTACKS)
def test_pg_two_roles(
    which: str, make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    project, url = two_roles(make_project, make_role, pg_server, pg_dbname)
    attack(pg_target(project, url), which)


@pytest.mark.parametrize("which", ATTACKS)
def test_pg_two_roles_control(
    which: str, make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    project, url = two_roles(make_project, make_role, pg_server, pg_dbname)
    control(pg_target(project, url), which)


TARGETS = {"postgresql": pg_target, "mysql": mysql_target, "sqlite": sqlite_target}


@pytest.fixture
def target(backend: str, backend_url: str, make_project: MakeProject) -> Target:
    """A project on a fresh database of each backend (on PostgreSQL as the superuser)."""
    return TARGETS[backend](make_project(url=backend_url), backend_url)


@pytest.mark.parametrize("which", ATTACKS)
@pytest.mark.parametrize("backend", ["sqlite", "mysql"], indirect=True)
def test_attack(which: str, target: Target) -> None:
    attack(target, which)


@pytest.mark.parametrize("which", ATTACKS)
def test_control(which: str, target: Target) -> None:
    control(target, which)


# -- through the CLI: a Redis grant behind a live built-in lease ----------------------------------


def test_pg_redis_grant_behind_a_live_builtin_lease_is_refused(project: Project, pg_url: str, redis_url: str) -> None:
    """Switching a resource to Redis moves its fence off the lease service, which the lease guard
    refuses while agent-A's built-in lease is live; the Redis grant sees that lease first (issue 24,
    defect 5) and is busy: exit 4, one line, nothing changed, nothing issued in Redis. The guard's own
    refusal of the same switch by direct SQL: attack 1 of ``test_attack`` (detach by hand).
    Control: once that lease is released the Redis grant goes through."""
    target = pg_target(project, pg_url)
    leased_to_agent_a(target)
    before = target.rows()
    refused = project.run_cli("lease", "acquire", "--holder", "agent-B", "--lease-url", redis_url).check(4)
    lines = stderr_lines(refused.stderr)
    assert len(lines) == 1 and lines[0].startswith(
        "fencemigrate: busy: lease on db/migrations is busy: its tokens come from the built-in lease service "
        "(its fence's token source is 'lease service'), whose lease is held by agent-A (token 1) until "
    ), refused
    payload = project.run_cli("lease", "acquire", "--holder", "agent-B", "--lease-url", redis_url, "--json").check(4)
    assert '"status": "busy"' in payload.stdout
    assert target.rows() == before
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    project.run_cli("lease", "acquire", "--holder", "agent-B", "--lease-url", redis_url).check(0)
    # The refused grants took nothing from Redis's counter.
    assert query(pg_url, "SELECT token, token_source FROM fencemigrate.agent_fence") == [(2, "redis")]


# -- a fence whose tokens come from Redis, with one role (issue 24, defect 6) ----------------------


@pytest.fixture
def one_role(make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str) -> Target:
    """A project whose role owns the fence schema it installs: one role, the default setup."""
    url = role_url(pg_server, pg_dbname, make_role())
    return pg_target(make_project(url=url), url)


def test_pg_one_role_a_redis_fence_is_not_raised_above_its_recorded_grant(one_role: Target, redis_url: str) -> None:
    """Issue 24, defect 6: with one role the owner's own UPDATE raised a fence whose tokens come from
    Redis, and the forged token wrote. A Redis grant records the token it issued (redis_grant) before
    it advances the fence, and no such fence goes above that, whoever writes: both forged tokens, and
    a fence moved to Redis above it, are refused (FM006), --token 777 stays FENCED, agent-A's token 1
    writes and the next grant issues token 2. Control: the same UPDATE on an external fence
    (test_pg_one_role_control_an_external_fence_is_raised_by_plain_sql)."""
    project = one_role.project
    add_revisions(project)
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    one_role.run("SELECT fencemigrate.claim('other', 5)")
    for forged in ("777", str(MAX_TOKEN)):
        assert_refused(
            one_role, f"UPDATE {{fence}} SET token = {forged} WHERE resource = 'db/migrations'", REDIS_NEVER_ISSUED
        )
    assert_refused(one_role, "UPDATE {fence} SET token_source = 'redis' WHERE resource = 'other'", REDIS_NEVER_ISSUED)
    forged_write = project.run_cli("upgrade", "head", "--token", "777", "--holder", "mallory").check(3)
    assert stderr_lines(forged_write.stderr)[1] == (
        "Rejected for token 777: token 777 was never issued by the lease service (Redis) for db/migrations "
        "(the last token it issued is 1)."
    )
    project.run_cli("upgrade", "head", "--token", "1", "--holder", "agent-A").check(0)
    project.run_cli("lease", "release", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    project.run_cli("lease", "acquire", "--holder", "agent-B", "--lease-url", redis_url).check(0)
    assert one_role.rows()[0] == [("db/migrations", 2, "redis"), ("other", 5, "external")]
    project.run_cli("check", "--db").check(0)


def test_pg_one_role_control_an_external_fence_is_raised_by_plain_sql(one_role: Target, redis_url: str) -> None:
    """Control: once agent-A's Redis lease is released and the resource detached, its fence takes
    external tokens, and the same UPDATE goes through (as a claim with a higher token would); --token
    777 then writes."""
    project = one_role.project
    add_revisions(project)
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    project.run_cli("lease", "release", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    project.run_cli("lease", "detach", "--lease-url", redis_url).check(0)
    one_role.run(one_role.sql("UPDATE {fence} SET token = 777"))
    project.run_cli("upgrade", "head", "--token", "777", "--holder", "mallory").check(0)


def test_pg_one_role_forging_both_rows_is_reported_by_check(one_role: Target, redis_url: str) -> None:
    """The documented limit of one role, as with the built-in service's lease row: the owner raises
    the recorded grant and then the fence by hand, and the forged token writes. No grant of that token
    is recorded in the event log: check --db reports it (FM413). Two roles: tests/test_forged_grants.py."""
    project = one_role.project
    add_revisions(project)
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    one_role.run("UPDATE fencemigrate.redis_grant SET token = 777")
    one_role.run(one_role.sql("UPDATE {fence} SET token = 777"))
    project.run_cli("upgrade", "head", "--token", "777", "--holder", "mallory").check(0)
    result = project.run_cli("check", "--db", "--json").check(1)
    assert [(item["rule"], item["message"]) for item in json.loads(result.stdout)["findings"]] == [
        (
            "FM413",
            "the fence token of db/migrations is 777 (tokens from Redis), but no grant of that token is recorded: "
            "it was written behind the lease service's back, and no grant can issue a token above it",
        )
    ]

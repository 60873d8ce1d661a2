"""Two roles: the migration role cannot forge a grant or a claim by plain SQL (issue 24: 3, 4, 8(d)).

The role that runs migrations (``install --grant-to``) may INSERT and UPDATE agent_fence and lease,
for the runner's own writes, and logs events through the owner's log_event(). The guard triggers
(and log_event(), for GRANT events) accept only what a grant, renew, release or claim writes, so that:

3. a forged grant (the issue's: token 2^62, held by mallory until 'infinity', the fence raised to it and a
   GRANT event) is refused statement by statement, nothing changes, and the next grant issues token 2;
8(d). the incarnation and the replication of the last grant are a grant's to write: with the
   incarnation rewritten, a copy of the database would not move to a new epoch, and would issue the
   original's next tokens again;
4. the version table's guard does not take a transaction's word that it claimed (the setting
   ``fencemigrate.claimed_xact``, the claim lock taken by hand): only claim()'s own proof.

Controls: SQL that does exactly what a grant does goes through (the guard refuses forgeries, not
grants; holder names are not credentials), claim() in the transaction proves the write, and one role
(which owns the fence) can still switch the guard off: then the forgery bricks the fence, and
``check --db`` reports the token no grant explains (FM413).
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
import pytest
from support.db import execute, libpq_url, query
from support.pg import PgServer
from support.pg_roles import MakeRole, role_url, two_roles
from support.project import MakeProject, Project

MAX_TOKEN = 4611686018427387904
RESOURCE = "db/migrations"

FORGED_LEASE = (
    f"UPDATE fencemigrate.lease SET token = {MAX_TOKEN}, holder = 'mallory', expires_at = 'infinity', "
    "granted_at = clock_timestamp()"
)
FORGED_FENCE = f"UPDATE fencemigrate.agent_fence SET token = {MAX_TOKEN}"
FORGED_EVENT = f"SELECT fencemigrate.log_event(NULL, '{RESOURCE}', 'GRANT', 'mallory', {MAX_TOKEN}, NULL, NULL)"
# What a grant of token 2 writes, in one transaction (lease_grant in queries/postgresql.sql, the grant_fence statement).
GRANT_SHAPED = [
    "UPDATE fencemigrate.lease SET holder = 'mallory', token = 2, ttl_ms = 60000, granted_at = clock_timestamp(), "
    "expires_at = clock_timestamp() + interval '60 seconds', replication = 'asynchronous'",
    "UPDATE fencemigrate.agent_fence SET token = 2, updated_at = now()",
    f"SELECT fencemigrate.log_event(NULL, '{RESOURCE}', 'GRANT', 'mallory', 2, NULL, NULL)",
]


def rows(url: str) -> Any:
    return (
        query(url, "SELECT resource, token, token_source, incarnation FROM fencemigrate.agent_fence"),
        query(url, "SELECT resource, token, holder, expires_at, granted_at, replication FROM fencemigrate.lease"),
        query(url, "SELECT id, kind, holder, token FROM fencemigrate.fence_event ORDER BY id"),
    )


def expired_grant(project: Project) -> None:
    """agent-A is granted token 1 for 1 s, applies 0001 with it, and lets the lease expire."""
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("0002", "0001", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--ttl", "1s").check(0)
    project.run_cli("upgrade", "0001", "--token", "1", "--holder", "agent-A").check(0)
    time.sleep(1.2)


def refused(url: str, sql: str | list[str], reason: str) -> None:
    """``sql`` (one transaction) is refused by the lease guard with ``reason``, and changes nothing."""
    before = rows(url)
    with pytest.raises(psycopg.Error) as raised, psycopg.connect(libpq_url(url)) as connection:
        for statement in [sql] if isinstance(sql, str) else sql:
            connection.execute(statement)
    assert raised.value.sqlstate == "FM006", raised.value
    assert str(raised.value).startswith("lease guard: ") and reason in str(raised.value), raised.value
    assert rows(url) == before


def granted_token(project: Project, holder: str) -> int:
    payload = json.loads(project.run_cli("lease", "acquire", "--holder", holder, "--json").check(0).stdout)
    return int(payload["lease"]["token"])


@pytest.fixture
def migrator(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> tuple[Project, str]:
    """The migration role's project and URL, the fence owned by another role."""
    return two_roles(make_project, make_role, pg_server, pg_dbname)


# -- 3: a forged grant ----------------------------------------------------------------------------


def test_two_roles_a_forged_grant_is_refused(migrator: tuple[Project, str]) -> None:
    project, url = migrator
    expired_grant(project)
    refused(url, FORGED_LEASE, "a lease TTL is at most 24 hours")
    refused(url, FORGED_LEASE.replace("'infinity'", "clock_timestamp() + interval '1 hour'"), "issues token 2 next")
    refused(url, "UPDATE fencemigrate.lease SET token = 1000", "moves only with a grant to a holder")
    refused(url, "UPDATE fencemigrate.lease SET expires_at = 'infinity'", "a lease TTL is at most 24 hours")
    refused(url, "INSERT INTO fencemigrate.lease (resource, token) VALUES ('other', 77)", "starts free")
    refused(url, FORGED_FENCE, "above the last token the lease service issued (1)")
    refused(url, FORGED_EVENT, f"no grant of token {MAX_TOKEN} of {RESOURCE} to mallory was made")
    refused(url, GRANT_SHAPED[2], f"no grant of token 2 of {RESOURCE} to mallory was made")
    with pytest.raises(psycopg.errors.InsufficientPrivilege), psycopg.connect(libpq_url(url)) as connection:
        connection.execute(
            "INSERT INTO fencemigrate.fence_event (resource, kind, holder, token) "
            f"VALUES ('{RESOURCE}', 'GRANT', 'mallory', 2)"
        )
    # Nothing was bricked: the next grant issues token 2, and agent-A is fenced by it.
    assert granted_token(project, "agent-B") == 2
    stale = project.run_cli("upgrade", "head", "--token", "1", "--holder", "agent-A")
    assert stale.code == 3, stale
    project.run_cli("upgrade", "head", "--token", "2", "--holder", "agent-B").check(0)
    project.run_cli("check", "--db").check(0)


def test_two_roles_control_what_a_grant_writes_goes_through(migrator: tuple[Project, str]) -> None:
    """SQL that writes exactly what a grant writes is a grant: accepted, and the next grant goes on from it."""
    project, url = migrator
    expired_grant(project)
    with psycopg.connect(libpq_url(url)) as connection:
        for statement in GRANT_SHAPED:
            connection.execute(statement)
    assert query(url, "SELECT token, holder FROM fencemigrate.lease") == [(2, "mallory")]
    project.run_cli("lease", "release", "--holder", "mallory").check(0)
    assert granted_token(project, "agent-B") == 3
    project.run_cli("upgrade", "head", "--token", "3", "--holder", "agent-B").check(0)
    project.run_cli("check", "--db").check(0)


def test_one_role_the_owner_can_switch_the_guard_off_and_check_reports_it(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    """The documented limit of one role: it owns the fence, disables the guard and forges the grant;
    every later grant then fails, and check --db names the tokens no recorded grant explains."""
    url = role_url(pg_server, pg_dbname, make_role())
    project = make_project(url=url)
    expired_grant(project)
    execute(url, "ALTER TABLE fencemigrate.lease DISABLE TRIGGER USER")
    execute(url, "ALTER TABLE fencemigrate.agent_fence DISABLE TRIGGER USER")
    execute(url, FORGED_LEASE.replace("'infinity'", "clock_timestamp()"))
    execute(url, FORGED_FENCE)
    execute(url, "ALTER TABLE fencemigrate.lease ENABLE TRIGGER USER")
    execute(url, "ALTER TABLE fencemigrate.agent_fence ENABLE TRIGGER USER")
    bricked = project.run_cli("lease", "acquire", "--holder", "agent-B")
    assert bricked.code != 0 and "no token is left" in bricked.stderr, bricked
    result = project.run_cli("check", "--db", "--json").check(1)
    found = [
        (item["rule"], item["message"]) for item in json.loads(result.stdout)["findings"] if item["rule"] == "FM413"
    ]
    assert found == [
        (
            "FM413",
            f"the lease token counter of {RESOURCE} is {MAX_TOKEN}, but no grant of that token is recorded: "
            "it was written behind the lease service's back, and no grant can issue a token above it",
        ),
        (
            "FM413",
            f"the fence token of {RESOURCE} is {MAX_TOKEN} (tokens from the lease service), but no grant of that "
            "token is recorded: it was written behind the lease service's back, and no grant can issue a token "
            "above it",
        ),
    ]


# -- 8(d): incarnation and replication --------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE fencemigrate.agent_fence SET incarnation = NULL",
        "UPDATE fencemigrate.agent_fence SET incarnation = '1/1/1'",
        "UPDATE fencemigrate.agent_fence SET incarnation = NULL, token = token + 1, token_source = 'external'",
        "UPDATE fencemigrate.lease SET replication = 'synchronous'",
        "UPDATE fencemigrate.lease SET replication = NULL",
        "UPDATE fencemigrate.lease SET granted_at = clock_timestamp()",
    ],
)
def test_two_roles_only_a_grant_writes_the_incarnation_and_the_replication(
    sql: str, migrator: tuple[Project, str]
) -> None:
    project, url = migrator
    expired_grant(project)
    refused(url, sql, "a grant")


# -- 4: a claim the version table's guard believes ------------------------------------------------

PRETENDED = {
    "setting": "SELECT set_config('fencemigrate.claimed_xact', pg_current_xact_id()::text, true)",
    "claim lock": f"SELECT pg_advisory_xact_lock_shared(1718503789, hashtext('{RESOURCE}'))",
    "session claim lock": f"SELECT pg_advisory_lock_shared(1718503789, hashtext('{RESOURCE}'))",
    "session table": (
        "CREATE TEMPORARY TABLE fencemigrate_session_claim (); "
        f"SELECT pg_advisory_lock_shared(1718503789, hashtext('{RESOURCE}'))"
    ),
}
WRITE = "UPDATE alembic_version SET version_num = 'forged'"


@pytest.mark.parametrize("pretence", list(PRETENDED))
def test_two_roles_a_pretended_claim_does_not_write_the_version_table(
    pretence: str, migrator: tuple[Project, str]
) -> None:
    project, url = migrator
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--token", "5").check(0)
    with pytest.raises(psycopg.Error) as raised, psycopg.connect(libpq_url(url)) as connection:
        connection.execute(PRETENDED[pretence])
        connection.execute(WRITE)
    assert raised.value.sqlstate == "FM005" and "carries no fencing token" in str(raised.value)
    assert query(url, "SELECT version_num FROM alembic_version") == [("0001",)]


def test_two_roles_the_proof_cannot_be_written_by_hand(migrator: tuple[Project, str]) -> None:
    project, url = migrator
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--token", "5").check(0)
    with pytest.raises(psycopg.errors.InsufficientPrivilege), psycopg.connect(libpq_url(url)) as connection:
        connection.execute(
            "INSERT INTO fencemigrate.claim_proof (pid, xact) "
            "VALUES (pg_backend_pid(), pg_current_xact_id()::text::bigint)"
        )


def test_two_roles_control_a_claim_proves_the_write(migrator: tuple[Project, str]) -> None:
    """claim() in the same transaction, and pre-check mode's session claim, still write the version table."""
    project, url = migrator
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("0002", "0001", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    project.run_cli("upgrade", "0001", "--token", "5").check(0)
    with psycopg.connect(libpq_url(url)) as connection:
        connection.execute(f"SELECT fencemigrate.claim('{RESOURCE}', 5)")
        connection.execute("UPDATE alembic_version SET version_num = version_num")
    project.run_cli("upgrade", "head", "--token", "6", "--mode", "precheck").check(0)
    assert query(url, "SELECT version_num FROM alembic_version") == [("0002",)]


# -- 6: a fence whose tokens come from Redis ------------------------------------------------------


def test_two_roles_a_redis_fence_is_raised_by_a_redis_grant_only(migrator: tuple[Project, str], redis_url: str) -> None:
    """Only a grant's advance_fence() (the owner's) raises a Redis-sourced fence: the migration role's
    UPDATE is refused, the forged token stays FENCED and the live Redis holder writes. The owner's
    own UPDATE is held below the recorded grant too: tests/test_lease_guard.py (one role)."""
    project, url = migrator
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    assert query(url, "SELECT token, token_source FROM fencemigrate.agent_fence") == [(1, "redis")]
    refused(url, "UPDATE fencemigrate.agent_fence SET token = 777", "takes its tokens from Redis")
    refused(url, f"UPDATE fencemigrate.agent_fence SET token = {MAX_TOKEN}", "takes its tokens from Redis")
    refused(
        url,
        "INSERT INTO fencemigrate.agent_fence (resource, token, token_source) VALUES ('other', 777, 'redis')",
        "takes its tokens from Redis",
    )
    forged = project.run_cli("upgrade", "head", "--token", "777", "--holder", "mallory")
    assert forged.code == 3, forged
    project.run_cli("upgrade", "head", "--token", "1", "--holder", "agent-A").check(0)
    project.run_cli("lease", "release", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    project.run_cli("lease", "acquire", "--holder", "agent-B", "--lease-url", redis_url).check(0)
    assert query(url, "SELECT token, token_source FROM fencemigrate.agent_fence") == [(2, "redis")]


def test_two_roles_the_recorded_redis_grant_is_read_only(migrator: tuple[Project, str], redis_url: str) -> None:
    """The migration role reads redis_grant (the last token Redis issued, which a fence whose tokens
    come from Redis may not pass) but cannot write it: it cannot raise the ceiling before raising the
    fence, as the owner can (tests/test_lease_guard.py). Its own grants record their tokens there
    through advance_fence(), which runs as the owner."""
    project, url = migrator
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    assert query(url, "SELECT resource, token FROM fencemigrate.redis_grant") == [(RESOURCE, 1)]
    for sql in (
        "UPDATE fencemigrate.redis_grant SET token = 777",
        "INSERT INTO fencemigrate.redis_grant (resource, token) VALUES ('other', 777)",
        "DELETE FROM fencemigrate.redis_grant",
        "TRUNCATE fencemigrate.redis_grant",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), psycopg.connect(libpq_url(url)) as connection:
            connection.execute(sql)
    project.run_cli("lease", "release", "--holder", "agent-A", "--lease-url", redis_url).check(0)
    project.run_cli("lease", "acquire", "--holder", "agent-B", "--lease-url", redis_url).check(0)
    assert query(url, "SELECT resource, token FROM fencemigrate.redis_grant") == [(RESOURCE, 2)]

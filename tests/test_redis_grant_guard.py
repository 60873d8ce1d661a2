"""A fence whose tokens come from Redis is held to the last token Redis issued, on SQLite and
MySQL/MariaDB (issue 24, defect 6; fence schema 0.7).

The database cannot ask Redis for its counter, so every Redis grant records the token it issued
in ``redis_grant``, in its own transaction before it advances the fence, and the lease guard
refuses a ``redis`` fence above that record, as it refuses a ``lease service`` fence above the
lease's counter. agent-A holds a live Redis lease with token 1:

* ``UPDATE agent_fence SET token = 777`` (and ``= 2^62``, after which no grant could issue a token),
  moving a fence to ``redis`` above its record, and inserting a ``redis`` fence row are refused
  (``lease guard: ``, FM006 on MySQL), nothing changes, ``--token 777`` stays FENCED, agent-A
  writes with token 1 and the next Redis grant issues token 2;
* ``redis_grant`` itself never goes down: no lower row in its place (``INSERT OR REPLACE``, an
  upsert), no lowering, renaming or deleting.

Controls: the same UPDATE on an ``external`` fence goes through (a claim does as much). Forging
both rows by hand (``redis_grant`` raised, then the fence) goes through, as forging the lease row
does for the built-in service: the documented limit, which ``check --db`` reports (FM413, no GRANT
of that token).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from support.fence_rows import stderr_lines
from support.mysql_server import mysql_rows
from support.project import MakeProject, Project, Result

from fencemigrate.dialects import dialect_for

MAX_TOKEN = 4611686018427387904
RESOURCE = "db/migrations"
NEVER_ISSUED_BY_REDIS = (
    "lease guard: this fence token is above the last token Redis issued (recorded by its grant): it was never issued"
)
GRANT_MONOTONIC = "redis_grant is monotonic"
NAMES = {"fence": "fencemigrate_agent_fence", "grant": "fencemigrate_redis_grant", "events": "fencemigrate_fence_event"}
INSERT_GRANT = "INSERT INTO {grant} (resource, token, granted_at)"


@dataclass(frozen=True)
class Target:
    """A project on SQLite or MariaDB, and plain SQL on its fence tables, through the driver."""

    project: Project
    backend: str
    url: str

    def run(self, template: str) -> list[tuple[Any, ...]]:
        """One statement, committed; its rows. ``{fence}``, ``{grant}``, ``{events}``: the tables."""
        sql = template.format(**NAMES)
        if self.backend == "mysql":
            return mysql_rows(self.url, sql)
        with closing(sqlite3.connect(Path(self.url.removeprefix("sqlite:///")), isolation_level=None)) as connection:
            return connection.execute(sql).fetchall()

    def rows(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The fence rows and the Redis grant records: what a refused statement leaves alone."""
        return (
            sorted(self.run("SELECT resource, token, token_source, updated_at FROM {fence}")),
            sorted(self.run("SELECT resource, token, granted_at FROM {grant}")),
        )

    def fence(self) -> list[tuple[Any, ...]]:
        """``(resource, token, token_source)`` of every fence row."""
        return sorted(self.run("SELECT resource, token, token_source FROM {fence}"))

    def grants(self) -> list[tuple[Any, ...]]:
        """``(resource, token)`` of every Redis grant record."""
        return sorted(self.run("SELECT resource, token FROM {grant}"))

    def cli(self, *args: str, redis_url: str | None = None) -> Result:
        """``fencemigrate *args`` in the project; with ``redis_url``, leased from Redis."""
        return self.project.run_cli(*args, *(("--lease-url", redis_url) if redis_url else ()))


@pytest.fixture
def target(backend: str, backend_url: str, make_project: MakeProject) -> Target:
    """A project on a fresh SQLite file or MariaDB database, with two revisions not yet applied."""
    project = make_project(url=backend_url)
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("0002", "0001", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    return Target(project, backend, backend_url)


def assert_refused(target: Target, template: str, message: str) -> None:
    """The statement is refused with ``message`` (on MySQL by a trigger's SIGNAL, error 1644 as PyMySQL
    reports it) and changes nothing."""
    before = target.rows()
    error = pymysql.err.MySQLError if target.backend == "mysql" else sqlite3.DatabaseError
    with pytest.raises(error) as raised:
        target.run(template)
    assert message in str(raised.value), raised.value
    if isinstance(raised.value, pymysql.err.MySQLError):
        assert raised.value.args[0] == 1644
    assert target.rows() == before


def now(target: Target) -> str:
    """The database's clock, as the fence tables' times are written."""
    return "UTC_TIMESTAMP(6)" if target.backend == "mysql" else "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


def findings(target: Target) -> list[tuple[str, str]]:
    """``(rule, message)`` of each finding of ``check --db``."""
    result = target.project.run_cli("check", "--db", "--json")
    assert result.code in (0, 1), result
    return [(item["rule"], item["message"]) for item in json.loads(result.stdout)["findings"]]


BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "mysql"], indirect=True)


# -- the attack: a Redis-sourced fence raised by plain SQL ----------------------------------------


@BACKENDS
def test_a_redis_fence_is_raised_by_a_redis_grant_only(target: Target, redis_url: str) -> None:
    """agent-A's live Redis lease (token 1): the forged fences are refused, the forged token stays
    FENCED, agent-A writes, and the next Redis grant issues token 2 and raises the record with it."""
    target.cli("lease", "acquire", "--holder", "agent-A", redis_url=redis_url).check(0)
    assert target.fence() == [(RESOURCE, 1, "redis")]
    assert target.grants() == [(RESOURCE, 1)]
    assert [rule for rule, _ in findings(target) if rule in ("FM405", "FM413")] == []  # the schema is whole

    assert_refused(target, "UPDATE {fence} SET token = 777", NEVER_ISSUED_BY_REDIS)
    assert_refused(target, f"UPDATE {{fence}} SET token = {MAX_TOKEN}", NEVER_ISSUED_BY_REDIS)
    assert_refused(
        target,
        "INSERT INTO {fence} (resource, token, token_source, updated_at) "
        f"VALUES ('other', 777, 'redis', {now(target)})",
        NEVER_ISSUED_BY_REDIS,
    )
    forged = target.cli("upgrade", "head", "--token", "777", "--holder", "mallory").check(3)
    assert stderr_lines(forged.stderr)[1] == (
        "Rejected for token 777: token 777 was never issued by the lease service (Redis) for db/migrations "
        "(the last token it issued is 1)."
    )
    assert target.fence() == [(RESOURCE, 1, "redis")]
    target.cli("upgrade", "head", "--token", "1", "--holder", "agent-A").check(0)
    target.cli("lease", "release", "--holder", "agent-A", redis_url=redis_url).check(0)
    granted = target.cli("lease", "acquire", "--holder", "agent-B", "--json", redis_url=redis_url).check(0)
    assert json.loads(granted.stdout)["lease"]["token"] == 2
    assert (target.fence(), target.grants()) == ([(RESOURCE, 2, "redis")], [(RESOURCE, 2)])


@BACKENDS
def test_a_fence_moved_to_redis_above_the_record_is_refused(target: Target, redis_url: str) -> None:
    """An external fence (other, token 5 by a claim) set to 'redis' by hand, at its token or above: Redis
    never issued it. Control: a Redis grant of other moves it, above its token 5, and records it first."""
    target.cli("lease", "acquire", "--holder", "agent-A", redis_url=redis_url).check(0)
    target.cli("upgrade", "0001", "--resource", "other", "--token", "5", "--holder", "harness").check(0)
    assert target.fence() == [(RESOURCE, 1, "redis"), ("other", 5, "external")]
    assert_refused(target, "UPDATE {fence} SET token_source = 'redis' WHERE resource = 'other'", NEVER_ISSUED_BY_REDIS)
    assert_refused(
        target, "UPDATE {fence} SET token_source = 'redis', token = 6 WHERE resource = 'other'", NEVER_ISSUED_BY_REDIS
    )
    granted = target.cli("lease", "acquire", "--resource", "other", "--holder", "B", "--json", redis_url=redis_url)
    assert json.loads(granted.check(0).stdout)["lease"]["token"] == 6
    assert target.fence() == [(RESOURCE, 1, "redis"), ("other", 6, "redis")]
    assert target.grants() == [(RESOURCE, 1), ("other", 6)]


@BACKENDS
def test_control_an_external_fence_is_raised_by_the_same_update(target: Target, redis_url: str) -> None:
    """Once agent-A has released and `lease detach --lease-url` gave the resource back to external
    tokens, the same UPDATE goes through and --token 777 writes: what a claim does."""
    target.cli("lease", "acquire", "--holder", "agent-A", redis_url=redis_url).check(0)
    target.cli("lease", "release", "--holder", "agent-A", redis_url=redis_url).check(0)
    target.cli("lease", "detach", redis_url=redis_url).check(0)
    target.run("UPDATE {fence} SET token = 777")
    assert target.fence() == [(RESOURCE, 777, "external")]
    target.cli("upgrade", "head", "--token", "777", "--holder", "harness").check(0)


@BACKENDS
def test_forging_both_rows_is_the_documented_limit_and_check_db_reports_it(target: Target, redis_url: str) -> None:
    """redis_grant raised by hand, then the fence: both go through (the same limit as the lease row
    of the built-in service without two roles), --token 777 writes, and check --db reports the
    fence token that no GRANT event names (FM413)."""
    target.cli("lease", "acquire", "--holder", "agent-A", redis_url=redis_url).check(0)
    target.run("UPDATE {grant} SET token = 777")
    target.run("UPDATE {fence} SET token = 777")
    target.cli("upgrade", "head", "--token", "777", "--holder", "mallory").check(0)
    assert (
        "FM413",
        "the fence token of db/migrations is 777 (tokens from Redis), but no grant of that token is recorded: "
        "it was written behind the lease service's back, and no grant can issue a token above it",
    ) in findings(target)


# -- redis_grant's own guard ------------------------------------------------------------------------


@BACKENDS
def test_the_recorded_token_never_goes_down(target: Target, redis_url: str) -> None:
    """Recorded tokens 3: a lower row in its place, a lower or renamed row, a deleted row and a
    token outside 1 .. 2^62 are refused; nothing changes. Raising it stays possible (the limit)."""
    for holder in ("agent-A", "agent-B", "agent-C"):
        target.cli("lease", "acquire", "--holder", holder, redis_url=redis_url).check(0)
        target.cli("lease", "release", "--holder", holder, redis_url=redis_url).check(0)
    assert target.grants() == [(RESOURCE, 3)]
    lower = f"{INSERT_GRANT} VALUES ('{RESOURCE}', 2, {now(target)})"
    if target.backend == "sqlite":
        assert_refused(target, lower.replace("INSERT", "INSERT OR REPLACE"), GRANT_MONOTONIC)
        assert_refused(target, f"{lower} ON CONFLICT (resource) DO UPDATE SET token = excluded.token", GRANT_MONOTONIC)
    else:
        assert_refused(target, lower.replace("INSERT", "REPLACE"), GRANT_MONOTONIC)
        assert_refused(target, f"{lower} ON DUPLICATE KEY UPDATE token = VALUES(token)", GRANT_MONOTONIC)
    assert_refused(target, "UPDATE {grant} SET token = 2", GRANT_MONOTONIC)
    assert_refused(target, "UPDATE {grant} SET resource = 'elsewhere'", GRANT_MONOTONIC)
    assert_refused(target, "DELETE FROM {grant}", GRANT_MONOTONIC)
    domain = "Redis grant tokens are integers from 1 to 4611686018427387904"
    assert_refused(target, f"UPDATE {{grant}} SET token = {MAX_TOKEN + 1}", domain)
    assert_refused(target, f"{INSERT_GRANT} VALUES ('other', 0, {now(target)})", domain)
    if target.backend == "sqlite":
        assert_refused(target, "UPDATE {grant} SET token = 'abc'", domain)
    target.run("UPDATE {grant} SET token = 4")
    assert target.grants() == [(RESOURCE, 4)]


@BACKENDS
def test_a_dropped_redis_guard_is_reported_and_put_back(target: Target, redis_url: str) -> None:
    """check --db knows the new table and triggers: none reported on an intact schema; a dropped
    one is FM405, and `install` puts it back."""
    target.cli("lease", "acquire", "--holder", "agent-A", redis_url=redis_url).check(0)
    assert [rule for rule, _ in findings(target) if rule == "FM405"] == []
    target.run("DROP TRIGGER fencemigrate_agent_fence_no_unissued_redis_token")
    assert (
        "FM405",
        f"the fence schema fencemigrate ({dialect_for(target.backend).schema_version()}) differs from fencemigrate's: "
        "trigger fencemigrate_agent_fence_no_unissued_redis_token is missing",
    ) in findings(target)
    assert target.cli("install").check(0).stdout.splitlines() == [
        "already installed",
        "put back guard trigger fencemigrate_agent_fence_no_unissued_redis_token (it was missing)",
    ]
    assert_refused(target, "UPDATE {fence} SET token = 777", NEVER_ISSUED_BY_REDIS)
    assert [rule for rule, _ in findings(target) if rule == "FM405"] == []

"""Token sources cannot be mixed (issue 24, defect 5): while a resource's tokens come from one lease
service, the other grants nothing on it, renews none of its older leases and detaches nothing, on
PostgreSQL, MySQL/MariaDB and SQLite. The built-in service cannot see Redis's leases, so it refuses
a ``redis`` resource outright, naming the one command that moves it (``lease detach --lease-url``,
which checks Redis); Redis, asked about a ``lease service`` resource, sees the built-in lease in the
database and is busy while it is live. Each refusal changes nothing.

The controls do by plain SQL what the old source-less ``lease detach`` did (the database cannot see a
Redis lease, so no guard refuses it): the built-in grant then fences the live Redis holder, which
``lease status --lease-url`` still shows holding, and ``--token 50``, never issued, writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

import pytest
import sqlalchemy as sa
from support.backend_rows import plain_sql, rows, table
from support.in_process import run_in_process
from support.project import MakeProject, Project, Result

RESOURCE = "db/migrations"
HINT = "redis://HOST:PORT/DB"
_CLEAN_ENV: dict[str, str | None] = {"FENCEMIGRATE_TOKEN": None, "ALEMBIC_CONFIG": None}

GRANT_REFUSED = (
    f"fencemigrate: usage: {RESOURCE} takes its tokens from Redis (its fence's token source is 'redis'), whose "
    "leases the migration database cannot see, so the built-in lease service grants nothing on it: pass "
    f"--lease-url {HINT} (or set fencemigrate_lease_url) to be granted by Redis, or first give it back to "
    f"external tokens with `fencemigrate lease detach --lease-url {HINT} --resource {RESOURCE}`, which checks "
    "Redis for a live lease; nothing was changed"
)
DETACH_REFUSED = (
    f"fencemigrate: usage: {RESOURCE} takes its tokens from Redis (its fence's token source is 'redis'), whose "
    "leases the migration database cannot see, so `lease detach` without --lease-url cannot tell whether a "
    f"Redis lease on it is live: run `fencemigrate lease detach --lease-url {HINT} --resource {RESOURCE}`; "
    "nothing was changed"
)


def cli(project: Project, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """``fencemigrate *args`` in the project, in this process, without inherited token or config."""
    return run_in_process(project.path, *args, env={**_CLEAN_ENV, **(env or {})})


def message(result: Result, code: int) -> str:
    """The one line (not Alembic's log) a refused command printed, once its exit status is ``code``."""
    result.check(code)
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("INFO  [")]
    assert len(lines) == 1, result
    return lines[0]


def first_line(result: Result, code: int) -> str:
    """The first line of a refusal told in several (LEASE LOST and its next steps)."""
    result.check(code)
    return [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("INFO  [")][0]


def source(backend: str, url: str) -> str:
    """The fence's token source."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            return str(
                connection.execute(
                    sa.text(f"SELECT token_source FROM {table(backend, 'agent_fence')} WHERE resource = :r"),
                    {"r": RESOURCE},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def granted(project: Project, holder: str, *args: str) -> int:
    out = cli(project, "lease", "acquire", "--holder", holder, "--json", *args).check(0).stdout
    return int(json.loads(out)["lease"]["token"])


def redis_holder(project: Project, redis_url: str) -> str | None:
    out = cli(project, "lease", "status", "--lease-url", redis_url, "--json").check(0).stdout
    lease = json.loads(out)["lease"]
    return None if lease["expired"] else lease["holder"]


@pytest.fixture
def target(backend: str, backend_url: str, make_project: MakeProject) -> Project:
    """A project on this backend's fresh database, with two revisions not yet applied."""
    project = make_project(url=backend_url)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("a2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    return project


# -- a Redis resource, asked of the built-in service -------------------------------------------------


def test_a_builtin_grant_on_a_redis_resource_is_refused(
    target: Project, backend: str, backend_url: str, redis_url: str
) -> None:
    """R holds the Redis lease (token 1). `lease acquire` and a run without --token, both without
    --lease-url: exit 2 naming Redis and `lease detach --lease-url`; nothing changed, R still holds
    the lease and writes with its token."""
    assert granted(target, "R", "--lease-url", redis_url) == 1
    before = rows(backend, backend_url)
    assert message(cli(target, "lease", "acquire", "--holder", "B"), 2) == GRANT_REFUSED
    if backend != "sqlite":  # SQLite refuses --preempt itself; elsewhere it cancels nobody here
        assert (
            message(cli(target, "lease", "acquire", "--holder", "B", "--preempt", "--wait", "1s"), 2) == GRANT_REFUSED
        )
    assert message(cli(target, "upgrade", "head", "--holder", "B"), 2) == GRANT_REFUSED
    assert rows(backend, backend_url) == before
    assert redis_holder(target, redis_url) == "R"
    cli(target, "upgrade", "head", "--token", "1", "--holder", "R").check(0)


def test_control_a_builtin_grant_fences_the_redis_holder_it_never_saw(
    target: Project, backend: str, backend_url: str, redis_url: str
) -> None:
    """The old path (the fence made external behind the live Redis lease, as the source-less detach
    did): the built-in service grants token 2, R is FENCED while Redis still shows it holding."""
    assert granted(target, "R", "--lease-url", redis_url) == 1
    plain_sql(backend, backend_url, "UPDATE {fence} SET token_source = 'external'")
    assert granted(target, "B") == 2
    assert source(backend, backend_url) == "lease service"
    assert redis_holder(target, redis_url) == "R"
    cli(target, "upgrade", "head", "--token", "1", "--holder", "R").check(3)


def test_a_detach_without_lease_url_of_a_redis_resource_is_refused(
    target: Project, backend: str, backend_url: str, redis_url: str
) -> None:
    """`lease detach` without --lease-url: exit 2, the fence stays Redis's, so `--token 50` (never
    issued) stays FENCED. `lease detach --lease-url` checks Redis: busy while R's lease lives, and
    once R has released, the resource moves to external tokens and the built-in service may grant."""
    assert granted(target, "R", "--lease-url", redis_url) == 1
    before = rows(backend, backend_url)
    assert message(cli(target, "lease", "detach"), 2) == DETACH_REFUSED
    assert rows(backend, backend_url) == before
    assert source(backend, backend_url) == "redis"
    cli(target, "upgrade", "head", "--token", "50", "--holder", "M").check(3)
    after = rows(backend, backend_url)
    assert [row[3:6] for row in after["fence_event"][len(before["fence_event"]) :]] == [("FENCED", "M", 50)]
    assert {**after, "fence_event": []} == {**before, "fence_event": []}
    before = after
    assert "held by R (token 1)" in message(cli(target, "lease", "detach", "--lease-url", redis_url), 4)
    assert rows(backend, backend_url) == before
    cli(target, "lease", "release", "--holder", "R", "--token", "1", "--lease-url", redis_url).check(0)
    cli(target, "lease", "detach", "--lease-url", redis_url).check(0)
    assert source(backend, backend_url) == "external"
    assert granted(target, "B") == 2
    assert source(backend, backend_url) == "lease service"


def test_control_a_source_less_detach_lets_an_unissued_token_write(
    target: Project, backend: str, backend_url: str, redis_url: str
) -> None:
    """The old source-less detach, by plain SQL: `--token 50`, never issued, writes while R's Redis
    lease is live, and R is fenced."""
    assert granted(target, "R", "--lease-url", redis_url) == 1
    plain_sql(backend, backend_url, "UPDATE {fence} SET token_source = 'external'")
    cli(target, "upgrade", "head", "--token", "50", "--holder", "M").check(0)
    assert redis_holder(target, redis_url) == "R"
    cli(target, "downgrade", "base", "--token", "1", "--holder", "R").check(3)


def test_a_builtin_renew_on_a_redis_resource(target: Project, backend: str, backend_url: str, redis_url: str) -> None:
    """A's built-in lease expired and Redis granted R: A's renew is LEASE LOST (Redis superseded it),
    not a renewal after expiry; R's renew without --lease-url is bad usage; nothing changed."""
    assert granted(target, "A", "--ttl", "1s") == 1
    time.sleep(1.2)
    assert granted(target, "R", "--lease-url", redis_url) == 2
    lease_row = rows(backend, backend_url)["lease"]
    lost = first_line(cli(target, "lease", "renew", "--holder", "A", "--token", "1"), 3)
    assert lost == (
        f"fencemigrate: lost: LEASE LOST: you no longer own {RESOURCE} (its tokens now come from Redis: a grant "
        "there has superseded this lease)."
    )
    assert message(cli(target, "lease", "renew", "--holder", "R", "--token", "2"), 2) == (
        f"fencemigrate: usage: {RESOURCE} takes its tokens from Redis (its fence's token source is 'redis'), whose "
        "leases the migration database cannot see, so the built-in lease service renews no lease on it: a Redis "
        f"lease is renewed with --lease-url {HINT} (or fencemigrate_lease_url set); nothing was changed"
    )
    assert rows(backend, backend_url)["lease"] == lease_row
    assert redis_holder(target, redis_url) == "R"


# -- a built-in resource, asked of Redis --------------------------------------------------------------


def test_a_redis_grant_or_detach_behind_a_live_builtin_lease_is_busy(
    target: Project, backend: str, backend_url: str, redis_url: str
) -> None:
    """A holds the built-in lease (token 1): a Redis grant, and a Redis detach, are busy (exit 4)
    naming the built-in service and A; Redis has no lease on the resource, nothing changed. Once A
    has released, the Redis grant goes through and makes the resource Redis's."""
    assert granted(target, "A") == 1
    before = rows(backend, backend_url)
    for command in (("lease", "acquire", "--holder", "R"), ("lease", "detach")):
        refused = message(cli(target, *command, "--lease-url", redis_url), 4)
        assert refused.startswith(
            f"fencemigrate: busy: lease on {RESOURCE} is busy: its tokens come from the built-in lease service "
            "(its fence's token source is 'lease service'), whose lease is held by A (token 1) until "
        ), refused
        assert refused.endswith(
            "; Redis grants and detaches nothing on it until that lease is released or has expired "
            "(nothing was changed); this is transient, try again later"
        ), refused
        assert rows(backend, backend_url) == before
        assert redis_holder(target, redis_url) is None
    cli(target, "upgrade", "head", "--token", "1", "--holder", "A").check(0)
    cli(target, "lease", "release", "--holder", "A", "--token", "1").check(0)
    assert granted(target, "R", "--lease-url", redis_url) == 2
    assert source(backend, backend_url) == "redis"


def test_a_redis_renew_on_a_builtin_resource_is_lease_lost(
    target: Project, backend: str, backend_url: str, redis_url: str
) -> None:
    """R's Redis lease expired, the resource went back to external tokens and the built-in service
    granted A: R's renew through Redis is LEASE LOST, not a renewal after expiry."""
    assert granted(target, "R", "--ttl", "1s", "--lease-url", redis_url) == 1
    time.sleep(1.2)
    cli(target, "lease", "detach", "--lease-url", redis_url).check(0)
    assert granted(target, "A") == 2
    lost = first_line(cli(target, "lease", "renew", "--holder", "R", "--token", "1", "--lease-url", redis_url), 3)
    assert lost == (
        f"fencemigrate: lost: LEASE LOST: you no longer own {RESOURCE} (its tokens now come from the built-in "
        "lease service: a grant there has superseded this lease)."
    )
    assert redis_holder(target, redis_url) is None

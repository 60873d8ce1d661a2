"""Where a resource's tokens come from (issue 12, defect 3): once a lease service (the built-in one,
or Redis) has granted a resource, the database refuses every token it never issued; a resource
written with external tokens (``--token`` from a harness's own leases) works as before; tokens
stay in 1..2**62, so no token can make the next grant overflow.

Each refusal has a control: plain Alembic (no fence) applies the same revision.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from support.db import query
from support.fence_rows import fence_token, snapshot, stderr_lines
from support.mysql_rows import app_tables
from support.mysql_rows import snapshot as mysql_snapshot
from support.project import MakeProject, Project, Result
from support.sqlite_rows import make_sqlite_project
from support.sqlite_rows import snapshot as sqlite_snapshot

MAX_TOKEN = 2**62


def never_issued(token: int, issued: int, service: str = "the lease service") -> list[str]:
    """The first two lines of the FENCED message for a token the lease service never issued."""
    return [
        "FENCED: this write to db/migrations is not yours to make.",
        f"Rejected for token {token}: token {token} was never issued by {service} for db/migrations "
        f"(the last token it issued is {issued}).",
    ]


def assert_never_issued(result: Result, token: int, issued: int, service: str = "the lease service") -> None:
    result.check(3)
    lines = stderr_lines(result.stderr)
    assert lines[:2] == never_issued(token, issued, service), result
    assert "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply." in lines


def granted(project: Project, holder: str, *args: str) -> int:
    out = project.run_cli("lease", "acquire", "--holder", holder, "--json", *args).check(0).stdout
    return int(json.loads(out)["lease"]["token"])


def sources(project: Project) -> dict[str, str]:
    payload = json.loads(project.run_cli("state", "--json").check(0).stdout)
    return {row["resource"]: row["token_source"] for row in payload["fences"]}


def add_two(project: Project) -> None:
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("a2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")


# -- PostgreSQL ---------------------------------------------------------------------------------


def test_pg_unissued_token_is_fenced_and_plain_alembic_is_not(project: Project, pg_url: str) -> None:
    """`upgrade --token 2` when the lease service issued only 1: FENCED, nothing changes; every
    fenced command refuses it the same way; the live holder's token 1 still writes."""
    add_two(project)
    assert granted(project, "A") == 1
    project.run_cli("upgrade", "a1", "--token", "1", "--holder", "A").check(0)
    before = snapshot(pg_url)
    for command in (
        ("upgrade", "head"),
        ("reapply", "a1"),
        ("downgrade", "base"),
        ("stamp", "head"),
    ):
        assert_never_issued(project.run_cli(*command, "--token", "2", "--holder", "stale"), 2, 1)
        assert snapshot(pg_url) == before
    assert fence_token(pg_url) == 1
    rejected = json.loads(project.run_cli("upgrade", "head", "--token", "2", "--json").check(3).stdout)
    assert (rejected["status"], rejected["token"], rejected["fence_token"]) == ("fenced", 2, 1)
    assert (
        rejected["reason"] == "token 2 was never issued by the lease service for db/migrations "
        "(the last token it issued is 1)"
    )
    project.run_cli("upgrade", "head", "--token", "1", "--holder", "A").check(0)
    assert fence_token(pg_url) == 1
    # Control: plain Alembic, with no fence, applies what the unissued token could not.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("downgrade", "a1").check(0)
    project.run_alembic("upgrade", "head").check(0)


def test_pg_the_database_refuses_an_unissued_token_in_claim(project: Project, pg_url: str) -> None:
    """Not only the CLI: claim() itself raises FM001, with the reason in its JSON DETAIL."""
    add_two(project)
    granted(project, "A")
    with closing(psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql"))) as conn:
        with pytest.raises(psycopg.Error) as raised:
            conn.execute("SELECT fencemigrate.claim('db/migrations', 2)")
        assert raised.value.sqlstate == "FM001"
        assert json.loads(raised.value.diag.message_detail or "")["reason"] == (
            "token 2 was never issued by the lease service for db/migrations (the last token it issued is 1)"
        )
        conn.rollback()
        with pytest.raises(psycopg.Error) as too_big:
            conn.execute(f"SELECT fencemigrate.claim('other', {MAX_TOKEN + 1})")
        assert too_big.value.sqlstate == "22023"
        conn.rollback()
        with pytest.raises(
            psycopg.Error, match="lease guard: the token counter of db/migrations moves only with a grant"
        ):
            conn.execute(f"UPDATE fencemigrate.lease SET token = {MAX_TOKEN + 1}")
    assert fence_token(pg_url) == 1


def test_pg_external_tokens_work_as_before(project: Project, pg_url: str) -> None:
    """A harness's own tokens, with no setting: each higher token writes; state says external."""
    add_two(project)
    assert json.loads(project.run_cli("state", "--json").check(0).stdout)["fences"] == []
    project.run_cli("upgrade", "a1", "--token", "5").check(0)
    project.run_cli("upgrade", "head", "--token", "9").check(0)
    assert fence_token(pg_url) == 9
    assert sources(project) == {"db/migrations": "external"}
    assert "  db/migrations  token=9  since " in project.run_cli("state").check(0).stdout
    assert "tokens from external" in project.run_cli("state").check(0).stdout


def test_pg_a_grant_switches_to_the_lease_service_and_detach_switches_back(project: Project, pg_url: str) -> None:
    """A grant fences every external token and makes the resource the lease service's; `lease detach`
    (refused while a lease is live) gives it back to external tokens above the fence."""
    add_two(project)
    project.run_cli("upgrade", "a1", "--token", "5").check(0)
    assert granted(project, "A") == 6
    assert sources(project) == {"db/migrations": "lease service"}
    assert_never_issued(project.run_cli("upgrade", "head", "--token", "7"), 7, 6)
    busy = project.run_cli("lease", "detach").check(4)
    assert stderr_lines(busy.stderr)[0].startswith("fencemigrate: busy: lease on db/migrations is busy: held by A")
    assert sources(project) == {"db/migrations": "lease service"}
    project.run_cli("lease", "release", "--holder", "A").check(0)
    out = project.run_cli("lease", "detach").check(0).stdout
    assert out.splitlines()[0] == (
        "db/migrations now takes external tokens (--token) above its fence token 6; "
        "the next grant gives it back to a lease service"
    )
    assert sources(project) == {"db/migrations": "external"}
    project.run_cli("upgrade", "head", "--token", "7").check(0)
    assert fence_token(pg_url) == 7


def test_pg_token_domain_leaves_room_for_the_next_grant(project: Project, pg_url: str) -> None:
    """2**62 is the largest token; one above is a usage error with the database unchanged; a grant
    above a fence at 2**62 refuses cleanly, never with "bigint out of range"."""
    add_two(project)
    project.run_cli("upgrade", "a1", "--token", "3").check(0)
    before = snapshot(pg_url)
    too_big = project.run_cli("upgrade", "head", "--token", str(MAX_TOKEN + 1)).check(2)
    assert stderr_lines(too_big.stderr) == [
        f"fencemigrate: usage: invalid token '{MAX_TOKEN + 1}': must be an integer from 1 to {MAX_TOKEN}"
    ]
    assert snapshot(pg_url) == before
    project.run_cli("upgrade", "head", "--token", str(MAX_TOKEN)).check(0)
    assert fence_token(pg_url) == MAX_TOKEN
    after = snapshot(pg_url)
    lease_before = query(pg_url, "SELECT * FROM fencemigrate.lease")
    refused = project.run_cli("lease", "acquire", "--holder", "A").check(1)
    assert stderr_lines(refused.stderr) == [
        f"fencemigrate: error: no token is left for db/migrations: its fence token is {MAX_TOKEN}, "
        f"the largest token there is, so no grant can issue a higher one (nothing was changed)"
    ]
    assert snapshot(pg_url) == after
    assert query(pg_url, "SELECT * FROM fencemigrate.lease") == lease_before


# -- SQLite -------------------------------------------------------------------------------------


def sqlite_file(project: Project) -> Path:
    return Path(project.url.removeprefix("sqlite:///"))


def test_sqlite_unissued_token_is_fenced_and_plain_alembic_is_not(tmp_path: Path) -> None:
    project = make_sqlite_project(tmp_path)
    add_two(project)
    assert granted(project, "A") == 1
    project.run_cli("upgrade", "a1", "--token", "1").check(0)
    before = sqlite_snapshot(sqlite_file(project))
    for command in (("upgrade", "head"), ("reapply", "a1"), ("downgrade", "base"), ("stamp", "head")):
        assert_never_issued(project.run_cli(*command, "--token", "2"), 2, 1)
        assert sqlite_snapshot(sqlite_file(project)) == before
    assert sources(project) == {"db/migrations": "lease service"}
    project.run_cli("upgrade", "head", "--token", "1").check(0)
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("downgrade", "a1").check(0)
    project.run_alembic("upgrade", "head").check(0)


def test_sqlite_fence_refuses_non_integer_and_oversized_tokens(tmp_path: Path) -> None:
    """The SQLite fence schema refuses 'abc', 2.5 and 2**62+1 as fence, lease and ledger tokens."""
    project = make_sqlite_project(tmp_path)
    add_two(project)
    project.run_cli("upgrade", "a1", "--token", "3").check(0)
    granted(project, "A")
    database = sqlite_file(project)
    before = sqlite_snapshot(database)
    for table, column in (("agent_fence", "token"), ("lease", "token"), ("applied_revision", "applied_token")):
        for bad in ("'abc'", "2.5", str(MAX_TOKEN + 1)):
            with closing(sqlite3.connect(database)) as conn:
                with pytest.raises(sqlite3.IntegrityError, match="tokens are integers from"):
                    conn.execute(f"UPDATE fencemigrate_{table} SET {column} = {bad}")
    assert sqlite_snapshot(database) == before
    project.run_cli("state").check(0)


# -- MariaDB ------------------------------------------------------------------------------------


def test_mariadb_unissued_token_is_fenced_and_plain_alembic_is_not(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    add_two(project)
    assert granted(project, "A") == 1
    project.run_cli("upgrade", "a1", "--token", "1").check(0)
    before = mysql_snapshot(mysql_url)
    for command in (("upgrade", "head"), ("reapply", "a1"), ("downgrade", "base"), ("stamp", "head")):
        assert_never_issued(project.run_cli(*command, "--token", "2"), 2, 1)
        assert mysql_snapshot(mysql_url) == before
    assert sources(project) == {"db/migrations": "lease service"}
    assert "t2" not in app_tables(mysql_url)
    project.run_cli("upgrade", "head", "--token", "1").check(0)
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("downgrade", "a1").check(0)
    project.run_alembic("upgrade", "head").check(0)


def test_mariadb_external_tokens_work_as_before(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    add_two(project)
    project.run_cli("upgrade", "a1", "--token", "5").check(0)
    project.run_cli("upgrade", "head", "--token", "9").check(0)
    assert sources(project) == {"db/migrations": "external"}


# -- Redis --------------------------------------------------------------------------------------


def test_redis_grant_makes_unissued_tokens_fenced(project: Project, pg_url: str, redis_url: str) -> None:
    add_two(project)
    project.set_ini_option("fencemigrate_lease_url", redis_url)
    assert granted(project, "A") == 1
    assert sources(project) == {"db/migrations": "redis"}
    before = snapshot(pg_url)
    assert_never_issued(project.run_cli("upgrade", "head", "--token", "2"), 2, 1, "the lease service (Redis)")
    assert snapshot(pg_url) == before
    project.run_cli("upgrade", "head", "--token", "1").check(0)
    # At head, with nothing to do (no claim): refused the same way, and nothing written.
    at_head = snapshot(pg_url)
    assert_never_issued(project.run_cli("upgrade", "head", "--token", "2"), 2, 1, "the lease service (Redis)")
    assert snapshot(pg_url) == at_head
    project.run_cli("upgrade", "head", "--token", "1").check(0)

"""The role that runs migrations lowers the fence behind the guard's back (issue 12, defect 4).

One role (it installed the fence schema, so it owns it): ``ALTER TABLE ... DISABLE TRIGGER USER``
works, and a stale token gets through -- the documented limit, and the control. What tampering
leaves behind is impossible otherwise, and ``check --db`` (FM405, FM411, FM412) and ``state``
report it; ``fencemigrate install`` puts a dropped or disabled guard back. Two roles (``install
--grant-to``): the fence belongs to another role, and PostgreSQL refuses the migration role's
attempts, while every fencemigrate command still works as the migration role.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from support.db import execute, query
from support.mysql_rows import fence_tokens as mysql_fence_tokens
from support.mysql_server import connect, mysql_rows
from support.pg import PgServer
from support.pg_roles import MakeRole, role_url, two_roles
from support.project import MakeProject, Project
from support.sqlite_rows import make_sqlite_project

from fencemigrate.dialects import dialect_for

PG_VERSION = dialect_for("postgresql").schema_version()
SQLITE_VERSION = dialect_for("sqlite").schema_version()
MYSQL_VERSION = dialect_for("mysql").schema_version()


def add_revisions(project: Project, count: int) -> None:
    for n in range(1, count + 1):
        project.add_revision(
            f"{n:04d}",
            None if n == 1 else f"{n - 1:04d}",
            f"CREATE TABLE t{n} (id int)",
            f"DROP TABLE t{n}",
            slug=f"t{n}",
        )


def state_json(project: Project) -> dict[str, Any]:
    payload = json.loads(project.run_cli("state", "--json").check(0).stdout)
    assert isinstance(payload, dict)
    return payload


def findings(project: Project, code: int) -> list[tuple[str, str]]:
    result = project.run_cli("check", "--db", "--json").check(code)
    return [(item["rule"], item["message"]) for item in json.loads(result.stdout)["findings"]]


def two_tokens_then_lowered(project: Project, lower: Callable[[], None]) -> None:
    """agent-A is granted token 1, agent-B token 2 and applies 0001; ``lower`` sets the fence back
    to 1; the stale agent-A then applies 0002 under token 1."""
    project.run_cli("lease", "acquire", "--holder", "agent-A").check(0)
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    project.run_cli("lease", "acquire", "--holder", "agent-B").check(0)
    project.run_cli("upgrade", "0001", "--token", "2", "--holder", "agent-B").check(0)
    stale = project.run_cli("upgrade", "0002", "--token", "1", "--holder", "agent-A")
    assert stale.code == 3, stale  # the guard holds: FENCED
    lower()
    project.run_cli("upgrade", "0002", "--token", "1", "--holder", "agent-A").check(0)


LEDGER_ABOVE = (
    "the ledger row of 0001 (alembic_version) has applied_token 2, above the fence token 1 of db/migrations: "
    "the fence was lowered after it was written"
)
FENCE_BELOW = (
    "the fence token of db/migrations is 1, below the last token the lease service issued (2): "
    "the fence was lowered, so stale tokens down to 1 are no longer fenced"
)


# -- PostgreSQL, one role: the attack works (the control), and is reported -------------------


def test_one_role_can_disable_the_guard_and_the_tampering_is_reported(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    role = make_role()
    url = role_url(pg_server, pg_dbname, role)
    project = make_project(url=url)
    add_revisions(project, 2)

    def lower() -> None:
        execute(url, "ALTER TABLE fencemigrate.agent_fence DISABLE TRIGGER USER")
        execute(url, "UPDATE fencemigrate.agent_fence SET token = 1")
        execute(url, "ALTER TABLE fencemigrate.agent_fence ENABLE TRIGGER USER")

    two_tokens_then_lowered(project, lower)
    assert query(url, "SELECT revision, applied_token FROM fencemigrate.applied_revision ORDER BY 1") == [
        ("0001", 2),
        ("0002", 1),
    ]
    assert findings(project, 1) == [("FM411", LEDGER_ABOVE), ("FM412", FENCE_BELOW)]
    state = state_json(project)
    assert state["ledger_above_fence"] == [
        {
            "version_table": "alembic_version",
            "revision": "0001",
            "resource": "db/migrations",
            "applied_token": 2,
            "fence_token": 1,
            "message": LEDGER_ABOVE,
        },
    ]
    assert state["fence_below_lease"] == [
        {"resource": "db/migrations", "fence_token": 1, "lease_token": 2, "message": FENCE_BELOW},
    ]
    assert state["fence_schema_problems"] == []
    text = project.run_cli("state").check(0).stdout.splitlines()
    assert text[-2:] == [f"ERROR: {LEDGER_ABOVE}", f"ERROR: {FENCE_BELOW}"]


def test_one_role_a_guard_left_disabled_is_reported_by_state_and_put_back_by_install(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    role = make_role()
    url = role_url(pg_server, pg_dbname, role)
    project = make_project(url=url)
    add_revisions(project, 1)
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check(0)
    assert project.run_cli("install").check(0).stdout == "already installed\n"
    execute(url, "ALTER TABLE fencemigrate.agent_fence DISABLE TRIGGER USER")
    execute(url, "DROP TRIGGER lease_monotonic ON fencemigrate.lease")
    execute(url, "DROP TRIGGER lease_no_forged_grant ON fencemigrate.lease")
    execute(url, "ALTER TABLE fencemigrate.lease ENABLE REPLICA TRIGGER lease_no_truncate")
    problems = [
        "trigger agent_fence_monotonic is disabled",
        "trigger agent_fence_no_truncate is disabled",
        "trigger agent_fence_no_unissued_token is disabled",
        "trigger lease_monotonic is missing",
        "trigger lease_no_forged_grant is missing",
        "trigger lease_no_truncate is disabled",
    ]
    altered = f"the fence schema fencemigrate ({PG_VERSION}) differs from fencemigrate's: "
    assert findings(project, 1) == [("FM405", altered + problem) for problem in problems]
    assert state_json(project)["fence_schema_problems"] == problems
    assert project.run_cli("state").check(0).stdout.splitlines()[-6:] == [
        f"ERROR: the fence schema differs from fencemigrate's: {problem}" for problem in problems
    ]

    assert project.run_cli("install").check(0).stdout.splitlines() == [
        "already installed",
        "put back guard trigger agent_fence_monotonic (it was disabled)",
        "put back guard trigger agent_fence_no_truncate (it was disabled)",
        "put back guard trigger agent_fence_no_unissued_token (it was disabled)",
        "put back guard trigger lease_monotonic (it was missing)",
        "put back guard trigger lease_no_forged_grant (it was missing)",
        "put back guard trigger lease_no_truncate (it was disabled)",
    ]
    assert findings(project, 0) == []
    with pytest.raises(psycopg.Error, match="cannot go down"):
        execute(url, "UPDATE fencemigrate.agent_fence SET token = 1")
    with pytest.raises(psycopg.Error, match="counter is monotonic: delete of lease x"):
        execute(url, "INSERT INTO fencemigrate.lease (resource, token) VALUES ('x', 0); DELETE FROM fencemigrate.lease")
    # agent_fence's foreign key to lease (fence schema 0.10) refuses it before the guard can.
    with pytest.raises(psycopg.Error, match="cannot truncate a table referenced in a foreign key constraint"):
        execute(url, "TRUNCATE fencemigrate.lease")
    with pytest.raises(psycopg.Error, match="counter is monotonic: truncate"):
        execute(url, "TRUNCATE fencemigrate.lease, fencemigrate.agent_fence")
    with pytest.raises(psycopg.Error, match="lease guard: fence token 6 of db/migrations is above the last token"):
        execute(url, "UPDATE fencemigrate.agent_fence SET token_source = 'lease service', token = 6")
    with pytest.raises(psycopg.Error, match="lease guard: token 0 of x was released: a new holder needs a new token"):
        execute(
            url,
            "INSERT INTO fencemigrate.lease (resource, token) VALUES ('x', 0); "
            "UPDATE fencemigrate.lease SET holder = 'mallory', expires_at = now() WHERE resource = 'x'",
        )
    assert project.run_cli("install").check(0).stdout == "already installed\n"


def test_one_role_the_recorded_redis_grants_guard_is_reported_and_put_back(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    """redis_grant and its guard triggers (fence schema 0.11) are fence objects like the others: a
    guard dropped or disabled is FM405 and ``install`` puts it back; the table dropped is FM405."""
    url = role_url(pg_server, pg_dbname, make_role())
    project = make_project(url=url)
    add_revisions(project, 1)
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check(0)
    execute(url, "DROP TRIGGER redis_grant_monotonic ON fencemigrate.redis_grant")
    execute(url, "ALTER TABLE fencemigrate.redis_grant DISABLE TRIGGER redis_grant_no_truncate")
    altered = f"the fence schema fencemigrate ({PG_VERSION}) differs from fencemigrate's: "
    assert findings(project, 1) == [
        ("FM405", altered + "trigger redis_grant_monotonic is missing"),
        ("FM405", altered + "trigger redis_grant_no_truncate is disabled"),
    ]
    assert project.run_cli("install").check(0).stdout.splitlines() == [
        "already installed",
        "put back guard trigger redis_grant_monotonic (it was missing)",
        "put back guard trigger redis_grant_no_truncate (it was disabled)",
    ]
    assert findings(project, 0) == []
    execute(url, "DROP TABLE fencemigrate.redis_grant")
    assert findings(project, 1) == [
        ("FM405", altered + "table redis_grant is missing"),
        ("FM405", altered + "trigger redis_grant_monotonic is missing"),
        ("FM405", altered + "trigger redis_grant_no_truncate is missing"),
    ]


def test_a_near_miss_is_not_reported(project: Project) -> None:
    """Equal tokens are what every run leaves: the ledger at the fence token, the fence at the
    lease's last token; a newer fence than ledger and lease is normal too (a --token run)."""
    add_revisions(project, 1)
    project.run_cli("lease", "acquire", "--holder", "agent-A").check(0)
    project.run_cli("upgrade", "0001", "--token", "1", "--holder", "agent-A").check(0)
    assert findings(project, 0) == []
    add_revisions(project, 2)
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    project.run_cli("lease", "detach").check(0)  # back to external tokens, which may run ahead
    project.run_cli("upgrade", "0002", "--token", "9", "--holder", "agent-B").check(0)
    assert findings(project, 0) == []
    state = state_json(project)
    assert (state["ledger_above_fence"], state["fence_below_lease"], state["fence_schema_problems"]) == ([], [], [])
    assert "ERROR" not in project.run_cli("state").check(0).stdout


# -- SQLite and MySQL: no roles, but the same detection and repair ---------------------------


def test_sqlite_a_dropped_guard_is_reported_and_put_back(tmp_path: Path) -> None:
    project = make_sqlite_project(tmp_path)
    database = tmp_path / "db.sqlite"
    add_revisions(project, 2)

    def lower() -> None:
        with closing(sqlite3.connect(database, isolation_level=None)) as connection:
            connection.execute("DROP TRIGGER fencemigrate_agent_fence_no_lowering")
            connection.execute("UPDATE fencemigrate_agent_fence SET token = 1")

    two_tokens_then_lowered(project, lower)
    altered = f"the fence schema fencemigrate ({SQLITE_VERSION}) differs from fencemigrate's: "
    missing = "trigger fencemigrate_agent_fence_no_lowering is missing"
    assert findings(project, 1) == [("FM405", altered + missing), ("FM411", LEDGER_ABOVE), ("FM412", FENCE_BELOW)]
    state = state_json(project)
    assert [row["message"] for row in state["ledger_above_fence"]] == [LEDGER_ABOVE]
    assert [row["message"] for row in state["fence_below_lease"]] == [FENCE_BELOW]
    assert state["fence_schema_problems"] == [missing]

    assert project.run_cli("install").check(0).stdout.splitlines() == [
        "already installed",
        "put back guard trigger fencemigrate_agent_fence_no_lowering (it was missing)",
    ]
    with closing(sqlite3.connect(database, isolation_level=None)) as connection:
        with pytest.raises(sqlite3.IntegrityError, match="cannot go down"):
            connection.execute("UPDATE fencemigrate_agent_fence SET token = 0")
    assert [rule for rule, _ in findings(project, 1)] == ["FM411", "FM412"]  # what got through stays reported


def test_mysql_a_dropped_guard_is_reported_and_put_back(make_project: MakeProject, mysql_url: str) -> None:
    project = make_project(url=mysql_url)
    add_revisions(project, 2)

    def lower() -> None:
        mysql_rows(mysql_url, "DROP TRIGGER fencemigrate_agent_fence_monotonic")
        mysql_rows(mysql_url, "UPDATE fencemigrate_agent_fence SET token = 1")

    two_tokens_then_lowered(project, lower)
    assert mysql_fence_tokens(mysql_url) == {"db/migrations": 1}
    altered = f"the fence schema fencemigrate ({MYSQL_VERSION}) differs from fencemigrate's: "
    missing = "trigger fencemigrate_agent_fence_monotonic is missing"
    assert findings(project, 1) == [("FM405", altered + missing), ("FM411", LEDGER_ABOVE), ("FM412", FENCE_BELOW)]
    assert state_json(project)["fence_schema_problems"] == [missing]

    assert project.run_cli("install").check(0).stdout.splitlines() == [
        "already installed",
        "put back guard trigger fencemigrate_agent_fence_monotonic (it was missing)",
    ]
    with closing(connect(mysql_url)) as connection, connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("UPDATE fencemigrate_agent_fence SET token = 2")  # raising to the last issued token is allowed
        with pytest.raises(pymysql.err.OperationalError, match="cannot go down"):
            cursor.execute("UPDATE fencemigrate_agent_fence SET token = 1")
        cursor.execute("ROLLBACK")
    assert mysql_fence_tokens(mysql_url) == {"db/migrations": 1}
    assert [rule for rule, _ in findings(project, 1)] == ["FM411", "FM412"]


# -- PostgreSQL, two roles: the fence belongs to another role --------------------------------

ESCAPING_THEN_FAILING = """\
with op.get_context().autocommit_block():
    op.execute("CREATE TABLE committed_early (id int)")
op.execute("SELECT * FROM missing_table")
"""
ESCAPING = """\
with op.get_context().autocommit_block():
    op.execute("CREATE TABLE t5 (id int)")
"""


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        ("ALTER TABLE fencemigrate.agent_fence DISABLE TRIGGER USER", "must be owner of table agent_fence"),
        (
            "ALTER TABLE fencemigrate.agent_fence DISABLE TRIGGER agent_fence_monotonic",
            "must be owner of table agent_fence",
        ),
        ("ALTER TABLE fencemigrate.lease DISABLE TRIGGER ALL", "must be owner of table lease"),
        ("DROP TRIGGER agent_fence_monotonic ON fencemigrate.agent_fence", "must be owner of relation agent_fence"),
        ("UPDATE fencemigrate.agent_fence SET token = 1", "the token of db/migrations cannot go down from 5 to 1"),
        ("DELETE FROM fencemigrate.agent_fence", "permission denied for table agent_fence"),
        ("TRUNCATE fencemigrate.agent_fence", "permission denied for table agent_fence"),
        ("UPDATE fencemigrate.lease SET token = 0", "the lease token counter is monotonic"),
        ("DELETE FROM fencemigrate.fence_event", "permission denied for table fence_event"),
        ("DROP TABLE fencemigrate.agent_fence", "must be owner of table agent_fence"),
        (
            "CREATE OR REPLACE FUNCTION fencemigrate.agent_fence_guard() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RETURN NEW; END $$",
            "permission denied for schema fencemigrate",
        ),
        (
            "ALTER FUNCTION fencemigrate.agent_fence_guard() OWNER TO CURRENT_USER",
            "must be owner of function agent_fence_guard",
        ),
        ("SET session_replication_role = replica", "permission denied to set parameter"),
    ],
)
def test_two_roles_the_migration_role_cannot_lower_the_fence(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str, sql: str, refusal: str
) -> None:
    project, url = two_roles(make_project, make_role, pg_server, pg_dbname)
    add_revisions(project, 1)
    project.run_cli("lease", "acquire", "--holder", "agent-A").check(0)  # token 1 and a lease row
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    project.run_cli("lease", "detach").check(0)  # back to external tokens
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check(0)
    with pytest.raises(psycopg.Error, match=refusal):
        execute(url, sql)
    assert query(url, "SELECT token FROM fencemigrate.agent_fence") == [(5,)]
    assert query(url, "SELECT token FROM fencemigrate.lease") == [(1,)]
    assert findings(project, 0) == []


def test_two_roles_every_command_works_as_the_migration_role(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    project, url = two_roles(make_project, make_role, pg_server, pg_dbname)
    add_revisions(project, 3)
    project.add_revision("0004", "0003", slug="early", extra_upgrade_code=ESCAPING_THEN_FAILING)
    project.add_revision("0005", "0004", slug="escaping", extra_upgrade_code=ESCAPING)

    project.run_cli("lease", "acquire", "--holder", "agent-A").check(0)
    project.run_cli("lease", "renew", "--holder", "agent-A").check(0)
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    project.run_cli("lease", "acquire", "--holder", "agent-B").check(0)
    project.run_cli("lease", "status").check(0)
    project.run_cli("upgrade", "0001", "--token", "2", "--holder", "agent-B").check(0)
    assert project.run_cli("upgrade", "0002", "--token", "1", "--holder", "agent-A").code == 3  # FENCED
    project.run_cli("lease", "release", "--holder", "agent-B").check(0)
    project.run_cli("upgrade", "0002", "--holder", "runner").check(0)  # its own lease: token 3
    project.run_cli("downgrade", "0001", "--holder", "runner").check(0)
    project.run_cli("upgrade", "0003", "--holder", "runner", "--mode", "precheck").check(0)
    project.run_cli("lease", "detach").check(0)  # agent-C's harness runs its own leases from here on
    project.run_cli("upgrade", "0004", "--token", "7", "--holder", "agent-C", "--mode", "precheck").check(1)
    assert state_json(project)["dirty"][0]["revision"] == "0004"
    project.run_cli("resolve", "0004", "--token", "7", "--as", "applied", "--holder", "agent-C").check(0)
    # A claim recorded with the revision (in one statement with its locks: --wait), then taken back.
    project.set_env_option("transaction_per_migration", True)
    project.run_cli("upgrade", "0005", "--token", "7", "--holder", "agent-C", "--wait", "10s").check(0)

    assert query(url, "SELECT revision, applied_token FROM fencemigrate.applied_revision ORDER BY 1") == [
        ("0001", 2),
        ("0002", 5),
        ("0003", 5),
        ("0004", 7),
        ("0005", 7),
    ]
    state = state_json(project)
    assert state["heads"] == ["0005"]
    assert (state["ledger_above_fence"], state["fence_below_lease"], state["fence_schema_problems"]) == ([], [], [])
    kinds = {event["kind"] for event in json.loads(project.run_cli("timeline", "--json").check(0).stdout)["events"]}
    assert {"GRANT", "RENEW", "RELEASE", "APPLY", "ROLLBACK", "FENCED", "RESOLVE"} <= kinds
    database_rules = "FM401,FM402,FM403,FM404,FM405,FM406,FM411,FM412"
    project.run_cli("check", "--db", "--select", database_rules).check(0)
    assert project.run_cli("install").check(0).stdout == "already installed\n"


def test_two_roles_only_the_owner_grants(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    project, url = two_roles(make_project, make_role, pg_server, pg_dbname)
    other = make_role()
    refused = project.run_cli("install", "--grant-to", other)
    refused.check(2)
    assert "only the owner of the fence schema" in refused.stderr.splitlines()[-1]
    assert query(url, f"SELECT has_schema_privilege('{other}', 'fencemigrate', 'USAGE')") == [(False,)]


def test_grant_to_an_unknown_role_changes_nothing(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    owner = make_role()
    url = role_url(pg_server, pg_dbname, owner)
    project = make_project(url=url)
    refused = project.run_cli("install", "--grant-to", "nobody_here")
    refused.check(2)
    assert refused.stderr.splitlines()[-1] == (
        "fencemigrate: usage: cannot grant to nobody_here: role nobody_here does not exist"
    )
    assert query(url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'fencemigrate'") == [(0,)]
    superuser = project.run_cli("install", "--grant-to", "postgres")
    superuser.check(2)
    assert superuser.stderr.splitlines()[-1] == (
        "fencemigrate: usage: cannot grant to postgres: role postgres is a superuser: "
        "it could switch the guard off whoever owns the fence"
    )
    owner_itself = project.run_cli("install", "--grant-to", owner)
    owner_itself.check(2)
    assert f"role {owner} owns the fence schema" in owner_itself.stderr
    assert query(url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'fencemigrate'") == [(0,)]


def test_grant_to_is_refused_on_sqlite_and_with_sql(tmp_path: Path) -> None:
    project = make_sqlite_project(tmp_path)
    refused = project.run_cli("install", "--grant-to", "migrator")
    refused.check(2)
    assert refused.stderr.splitlines()[-1] == (
        "fencemigrate: usage: --grant-to is for PostgreSQL: sqlite has no roles that can own the fence apart"
    )
    assert not (tmp_path / "db.sqlite").exists()


# -- Two roles: a version table the migration role already owns (issue 24, 8(b)) ------------------
# Alembic's version table, created by the migration role's plain alembic before the database was
# fenced, is the migration role's: its owner can drop the guard trigger. `install --grant-to` gives
# it to the fence's owner when the installing role may, and otherwise refuses, naming the statement.


def migrator_owns_the_version_table(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> tuple[Project, str, str]:
    """The migration role's project, its URL and role name, after its plain `alembic upgrade 0001`."""
    migrator = make_role()
    url = role_url(pg_server, pg_dbname, migrator)
    project = make_project(url=url)
    add_revisions(project, 2)
    project.run_alembic("upgrade", "0001").check()
    return project, url, migrator


DROP_GUARD = "DROP TRIGGER fencemigrate_no_tokenless_write ON public.alembic_version"


def test_two_roles_install_takes_the_version_table_from_the_migration_role(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str, pg_url: str
) -> None:
    project, url, migrator = migrator_owns_the_version_table(make_project, make_role, pg_server, pg_dbname)
    installer = make_project(url=pg_url, name="dba")  # a superuser may give the table away
    granted = installer.run_cli("install", "--grant-to", migrator).check(0)
    assert granted.stdout.splitlines()[-1] == (
        f"granted {migrator} what fencemigrate runs need in the fence schema fencemigrate, which it does not "
        f"own, and the rows of the version table (the version table, {migrator}'s until now, is the fence "
        "owner's): it cannot switch the guard off"
    )
    assert query(url, "SELECT relowner::regrole::text FROM pg_class WHERE oid = 'alembic_version'::regclass") == [
        ("postgres",)
    ]
    with pytest.raises(psycopg.Error, match="must be owner of"):
        execute(url, DROP_GUARD)
    refused = project.run_alembic("upgrade", "head")
    assert refused.code != 0 and "fencemigrate refused this" in refused.stderr, refused
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent").check(0)
    assert query(url, "SELECT version_num FROM alembic_version") == [("0002",)]


def test_two_roles_install_refuses_when_it_cannot_take_the_version_table(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> None:
    project, url, migrator = migrator_owns_the_version_table(make_project, make_role, pg_server, pg_dbname)
    owner = make_role()
    installer = make_project(url=role_url(pg_server, pg_dbname, owner), name="owner")
    refused = installer.run_cli("install", "--grant-to", migrator)
    refused.check(2)
    assert refused.stderr.splitlines()[-1] == (
        f"fencemigrate: usage: the version table alembic_version belongs to {migrator}, which could drop "
        f"its guard and write without a token: run `ALTER TABLE alembic_version OWNER TO {owner};` as a "
        f"superuser, then `fencemigrate install --grant-to {migrator}` again (nothing was changed)"
    )
    assert query(url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'fencemigrate'") == [(0,)]
    execute(url.replace(migrator, "postgres"), f'ALTER TABLE alembic_version OWNER TO "{owner}"')  # as told
    installer.run_cli("install", "--grant-to", migrator).check(0)
    with pytest.raises(psycopg.Error, match="must be owner of"):
        execute(url, DROP_GUARD)


def test_the_owner_of_the_version_table_drops_its_guard_and_check_db_reports_it(project: Project) -> None:
    """Control: whoever owns the version table (one role here) drops the guard, and plain alembic
    writes; check --db reports the missing guard (FM410), and `install` puts it back."""
    add_revisions(project, 2)
    project.run_cli("upgrade", "0001", "--token", "1", "--holder", "agent").check(0)
    execute(project.url, DROP_GUARD)
    project.run_alembic("upgrade", "head").check()
    rules = [rule for rule, _ in findings(project, 1)]
    assert "FM410" in rules, rules
    assert (
        "FM410",
        "the version table alembic_version has no guard trigger, and tokenless writes were never allowed: "
        "plain alembic writes it without a fencing token",
    ) in findings(project, 1)
    project.run_cli("install").check(0)
    assert "FM410" not in [rule for rule, _ in findings(project, 1)]

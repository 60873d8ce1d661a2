"""The fence schema as a real PostgreSQL extension, and its monotonic guard.

``sql/fencemigrate.control`` and the install script of the default version are copied into the
server's extension directory; ``CREATE EXTENSION fencemigrate`` must load them and fencemigrate
must then use the extension instead of installing its own copy. An extension is upgraded with
``ALTER EXTENSION ... UPDATE`` (the synthetic upgrade of ``tests/support/schema_upgrade``).
The guard tests show that no client, fencemigrate or not, can lower a fence token or
delete fence rows; the control shows the same statements succeed on a table without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from support.db import alembic_versions, query, table_names
from support.fence_rows import FENCE_TABLES, assert_fenced, fence_token, scratch_database
from support.pg import PgServer
from support.project import MakeProject, Project

from fencemigrate.config import sql_dir
from fencemigrate.dialects import dialect_for
from fencemigrate.dialects.base import SchemaScripts
from fencemigrate.dialects.postgresql import install_script

PG_VERSION = dialect_for("postgresql").schema_version()

RESOURCE = "db/migrations"
EXTENSION_FILES = tuple(
    sorted(path.name for path in sql_dir().glob("fencemigrate*") if path.suffix in (".control", ".sql"))
)


def in_ci() -> bool:
    """True when running in CI (``CI=true``), where a skip would hide a broken setup."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def ledger(url: str) -> list[tuple[str, int]]:
    """(revision, applied_token) of every ledger row."""
    rows = query(url, "SELECT revision, applied_token FROM fencemigrate.applied_revision ORDER BY revision")
    return [(str(r[0]), int(r[1])) for r in rows]


# -- the extension -----------------------------------------------------------------------------


@pytest.fixture
def extension_dir(pg_conn: psycopg.Connection[Any]) -> Iterator[Path]:
    """Copy the extension files into the server's extension directory; restore it afterwards.

    The directory comes from the server (``pg_config`` view, SHAREDIR). If it is not
    writable the test FAILS in CI (``CI=true``) and is skipped, with the reason, elsewhere.
    """
    row = pg_conn.execute("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'").fetchone()
    assert row is not None
    directory = Path(row[0]) / "extension"
    if not (directory.is_dir() and os.access(directory, os.W_OK)):
        reason = (
            f"the server's extension directory {directory} is not writable by uid {os.getuid()}: "
            "cannot install the fencemigrate extension files"
        )
        if in_ci():
            pytest.fail(reason + " (CI=true: this must not be skipped)")
        pytest.skip(reason)
    saved: dict[Path, bytes] = {}
    for name in EXTENSION_FILES:
        target = directory / name
        if target.exists():
            saved[target] = target.read_bytes()
        shutil.copyfile(sql_dir() / name, target)
    try:
        yield directory
    finally:
        for name in EXTENSION_FILES:
            target = directory / name
            if target in saved:
                target.write_bytes(saved[target])
            else:
                target.unlink(missing_ok=True)


def test_extension_loads_and_is_used_without_reinstalling(
    extension_dir: Path, pg_conn: psycopg.Connection[Any], pg_url: str, project: Project
) -> None:
    """CREATE EXTENSION loads the sql/ files; fencemigrate uses it as is and fences as usual;
    DROP EXTENSION removes every fence object. Control: plain alembic applies the stale write."""
    available = pg_conn.execute(
        "SELECT default_version FROM pg_available_extensions WHERE name = 'fencemigrate'"
    ).fetchall()
    assert available == [(PG_VERSION,)]
    pg_conn.execute("CREATE SCHEMA fencemigrate")
    pg_conn.execute("CREATE EXTENSION fencemigrate SCHEMA fencemigrate")
    assert pg_conn.execute(
        "SELECT e.extversion, n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'fencemigrate'"
    ).fetchall() == [(PG_VERSION, "fencemigrate")]
    assert table_names(pg_url, "fencemigrate") == FENCE_TABLES
    members_before = query(
        pg_url,
        "SELECT count(*) FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension "
        "WHERE extname = 'fencemigrate') AND deptype = 'e'",
    )

    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    result = project.run_cli("upgrade", "head", "--token", "1").check(0)
    assert "installed the fence schema" not in result.stdout
    assert "  applied a1 under token 1" in result.stdout.splitlines()
    project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    payload = json.loads(project.run_cli("upgrade", "head", "--token", "2", "--json").check(0).stdout)
    assert payload["installed_fence_schema"] is False
    # The runner did not add objects of its own next to the extension's.
    assert (
        query(
            pg_url,
            "SELECT count(*) FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension "
            "WHERE extname = 'fencemigrate') AND deptype = 'e'",
        )
        == members_before
    )
    assert ledger(pg_url) == [("a1", 1), ("b2", 2)]
    assert fence_token(pg_url) == 2

    # Fenced as usual: token 2 has written, so token 1 is stale.
    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")
    assert_fenced(project.run_cli("upgrade", "head", "--token", "1"), token=1, fence=2)
    assert table_names(pg_url) == ["alembic_version", "t1", "t2"]
    assert alembic_versions(pg_url) == ["b2"]
    assert ledger(pg_url) == [("a1", 1), ("b2", 2)]
    assert fence_token(pg_url) == 2

    # Control: plain alembic applies (with the extension in place) the revision token 1 was FENCED from.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(pg_url) == ["c3"]

    # The guard is part of the extension too.
    with pytest.raises(psycopg.Error) as raised:
        pg_conn.execute("UPDATE fencemigrate.agent_fence SET token = 1")
    assert raised.value.sqlstate == "FM002"

    pg_conn.execute("DROP EXTENSION fencemigrate")
    assert pg_conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'fencemigrate'").fetchone() == (0,)
    assert table_names(pg_url, "fencemigrate") == []
    assert query(pg_url, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'fencemigrate'::regnamespace") == [(0,)]


def test_an_extension_is_upgraded_with_alter_extension_by_the_runner(
    extension_dir: Path, pg_conn: psycopg.Connection[Any], pg_url: str, project: Project, tmp_path: Path
) -> None:
    """A fence schema loaded with CREATE EXTENSION is upgraded with ALTER EXTENSION UPDATE, from the
    server's own files (here the synthetic upgrade of tests/support/schema_upgrade): its fence and
    ledger rows stay, the new object belongs to the extension."""
    target = f"{PG_VERSION.split('.')[0]}.{int(PG_VERSION.split('.')[1]) + 1}"
    name = f"fencemigrate--{PG_VERSION}--{target}.sql"
    upgrade = (Path(__file__).parent / "support" / "schema_upgrade" / "fencemigrate--@FROM@--@TO@.sql").read_text()
    (tmp_path / name).write_text(upgrade.replace("@FROM@", PG_VERSION).replace("@TO@", target))
    pg_conn.execute("CREATE SCHEMA fencemigrate")
    pg_conn.execute("CREATE EXTENSION fencemigrate SCHEMA fencemigrate")
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--token", "3").check(0)
    shutil.copyfile(tmp_path / name, extension_dir / name)
    engine = sa.create_engine(pg_url, poolclass=sa.NullPool)
    try:
        with engine.begin() as connection:
            scripts = SchemaScripts(tmp_path, target)  # the runner's copy has no full script: only the server's is used
            assert dialect_for("postgresql").ensure_installed(connection, '"fencemigrate"', scripts) is True
    finally:
        engine.dispose()
        (extension_dir / name).unlink()
    assert pg_conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'fencemigrate'").fetchall() == [
        (target,)
    ]
    assert query(pg_url, "SELECT fencemigrate.schema_version()") == [(target,)]
    assert ledger(pg_url) == [("a1", 3)]
    assert fence_token(pg_url) == 3
    assert query(
        pg_url,
        "SELECT count(*) FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension "
        "WHERE extname = 'fencemigrate') AND deptype = 'e' AND objid = 'fencemigrate.upgrade_probe'::regclass",
    ) == [(1,)]


def test_extension_files_match_the_runner_install(extension_dir: Path) -> None:
    """The files in the server's extension directory are exactly the shipped sql/ files."""
    for name in EXTENSION_FILES:
        assert (extension_dir / name).read_bytes() == (sql_dir() / name).read_bytes()


# -- the monotonic guard -------------------------------------------------------------------------


@pytest.fixture
def guarded(pg_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """The fence schema installed (the runner's install script) and db/migrations claimed at 5."""
    pg_conn.execute(install_script('"fencemigrate"'))
    pg_conn.execute("SELECT fencemigrate.claim('db/migrations', 5)")
    return pg_conn


def fence_rows(conn: psycopg.Connection[Any], table: str = "fencemigrate.agent_fence") -> list[tuple[str, int]]:
    """(resource, token) rows of a fence table."""
    return [(str(r[0]), int(r[1])) for r in conn.execute(f"SELECT resource, token FROM {table} ORDER BY 1")]


FORBIDDEN = [
    pytest.param("UPDATE {table} SET token = token - 1", id="lower-token"),
    pytest.param("UPDATE {table} SET token = 1 WHERE resource = 'db/migrations'", id="lower-to-1"),
    pytest.param("UPDATE {table} SET resource = 'db/renamed'", id="rename-resource"),
    pytest.param("DELETE FROM {table}", id="delete"),
    pytest.param("TRUNCATE {table}", id="truncate"),
]


@pytest.mark.parametrize("statement", FORBIDDEN)
def test_guard_rejects_with_fm002(guarded: psycopg.Connection[Any], statement: str) -> None:
    """Lowering, renaming, deleting or truncating fence rows fails with SQLSTATE FM002; row unchanged."""
    with pytest.raises(psycopg.Error) as raised:
        guarded.execute(statement.format(table="fencemigrate.agent_fence"))
    assert raised.value.sqlstate == "FM002", raised.value
    assert str(raised.value).startswith("agent_fence is monotonic: ")
    assert fence_rows(guarded) == [(RESOURCE, 5)]


@pytest.mark.parametrize("statement", FORBIDDEN)
def test_guard_control_plain_table_allows_it(guarded: psycopg.Connection[Any], statement: str) -> None:
    """Control: the same statement succeeds on a copy of agent_fence without the guard triggers."""
    guarded.execute("CREATE TABLE plain_fence (LIKE fencemigrate.agent_fence INCLUDING ALL EXCLUDING GENERATED)")
    guarded.execute("INSERT INTO plain_fence SELECT * FROM fencemigrate.agent_fence")
    assert fence_rows(guarded, "plain_fence") == [(RESOURCE, 5)]
    guarded.execute(statement.format(table="plain_fence"))
    assert fence_rows(guarded, "plain_fence") != [(RESOURCE, 5)]


def test_guard_allows_raising_the_token(guarded: psycopg.Connection[Any]) -> None:
    """Raising a token with a raw UPDATE is allowed (it only fences older holders out)."""
    guarded.execute("UPDATE fencemigrate.agent_fence SET token = token + 1")
    assert fence_rows(guarded) == [(RESOURCE, 6)]
    guarded.execute("UPDATE fencemigrate.agent_fence SET token = 6")  # same value: allowed
    assert fence_rows(guarded) == [(RESOURCE, 6)]


#: What would lower the last token a Redis grant recorded: FORBIDDEN, and an upsert of a lower token.
REDIS_GRANT_FORBIDDEN = [
    *FORBIDDEN,
    pytest.param(
        "INSERT INTO {table} (resource, token) VALUES ('db/migrations', 1) "
        "ON CONFLICT (resource) DO UPDATE SET token = excluded.token",
        id="upsert-lower",
    ),
]


@pytest.fixture
def redis_granted(guarded: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """``guarded``, then a Redis grant's fence advance to token 7: redis_grant records 7."""
    guarded.execute("SELECT fencemigrate.advance_fence('db/migrations', 7, 'redis', NULL)")
    assert fence_rows(guarded, "fencemigrate.redis_grant") == [(RESOURCE, 7)]
    return guarded


@pytest.mark.parametrize("statement", REDIS_GRANT_FORBIDDEN)
def test_redis_grant_guard_rejects_with_fm002(redis_granted: psycopg.Connection[Any], statement: str) -> None:
    """The last token a Redis grant recorded never goes down, and its row is never renamed, deleted
    or truncated (SQLSTATE FM002); the row is unchanged."""
    with pytest.raises(psycopg.Error) as raised:
        redis_granted.execute(statement.format(table="fencemigrate.redis_grant"))
    assert raised.value.sqlstate == "FM002", raised.value
    assert str(raised.value).startswith("redis_grant is monotonic: ")
    assert fence_rows(redis_granted, "fencemigrate.redis_grant") == [(RESOURCE, 7)]


@pytest.mark.parametrize("statement", REDIS_GRANT_FORBIDDEN)
def test_redis_grant_guard_control_plain_table_allows_it(
    redis_granted: psycopg.Connection[Any], statement: str
) -> None:
    """Control: the same statement succeeds on a copy of redis_grant without the guard triggers."""
    redis_granted.execute("CREATE TABLE plain_grant (LIKE fencemigrate.redis_grant INCLUDING ALL)")
    redis_granted.execute("INSERT INTO plain_grant SELECT * FROM fencemigrate.redis_grant")
    redis_granted.execute(statement.format(table="plain_grant"))
    assert fence_rows(redis_granted, "plain_grant") != [(RESOURCE, 7)]


def test_redis_grant_is_raised_by_the_next_grant_only_upwards(redis_granted: psycopg.Connection[Any]) -> None:
    """A grant raises the record to the token it issued, and an advance to a lower token (a token at
    or above it has written: the caller rolls the grant back) leaves it where it was."""
    redis_granted.execute("SELECT fencemigrate.advance_fence('db/migrations', 9, 'redis', NULL)")
    assert fence_rows(redis_granted, "fencemigrate.redis_grant") == [(RESOURCE, 9)]
    advanced = redis_granted.execute("SELECT fencemigrate.advance_fence('db/migrations', 8, 'redis', NULL)").fetchone()
    assert advanced == (False,)
    assert fence_rows(redis_granted, "fencemigrate.redis_grant") == [(RESOURCE, 9)]
    assert fence_rows(redis_granted) == [(RESOURCE, 9)]


def test_redis_grant_token_domain(redis_granted: psycopg.Connection[Any]) -> None:
    """A recorded token is in the tokens' domain, 1 .. 2^62, like the fence's: one above is refused
    (a check violation); 2^62 itself is a token (the owner's own UPDATE, the documented limit)."""
    with pytest.raises(psycopg.errors.CheckViolation):
        redis_granted.execute("UPDATE fencemigrate.redis_grant SET token = 4611686018427387905")
    redis_granted.execute("UPDATE fencemigrate.redis_grant SET token = 4611686018427387904")
    assert fence_rows(redis_granted, "fencemigrate.redis_grant") == [(RESOURCE, 4611686018427387904)]


#: The two ways a transaction claims the fence: claim(), and claim_and_record() (one revision per
#: transaction), which claims in its own body and must refuse exactly as claim() does.
CLAIMS = [
    pytest.param("SELECT fencemigrate.claim('db/migrations', {token})", id="claim"),
    pytest.param(
        "SELECT fencemigrate.claim_and_record('db/migrations', {token}, 'alembic_version', "
        "'alembic_version'::regclass, 'r1', 'agent', NULL, 'source')",
        id="claim_and_record",
    ),
]


def refused_claim(conn: psycopg.Connection[Any], claim: str, token: str) -> psycopg.Error:
    """The error of ``claim`` under ``token``, after checking that it left no ledger row, event or
    pending COMMIT check behind."""
    conn.execute("CREATE TABLE IF NOT EXISTS alembic_version (version_num varchar(32) PRIMARY KEY)")
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(claim.format(token=token))
    for table in ("applied_revision", "fence_event", "pending_version_check"):
        assert conn.execute(f"SELECT count(*) FROM fencemigrate.{table}").fetchone() == (0,), table
    return raised.value


@pytest.mark.parametrize("claim", CLAIMS)
def test_claim_with_lower_token_raises_fm001_with_json_detail(guarded: psycopg.Connection[Any], claim: str) -> None:
    """claim() under a lower token raises FM001; DETAIL is JSON with resource/token/fence_token/reason."""
    error = refused_claim(guarded, claim, "3")
    assert error.sqlstate == "FM001"
    assert error.diag.message_primary is not None
    assert error.diag.message_primary.startswith(
        "FENCED: token 5 has since written to db/migrations (resource db/migrations, your token 3). "
        "This is NOT a transient error"
    )
    assert error.diag.message_detail is not None
    assert json.loads(error.diag.message_detail) == {
        "resource": RESOURCE,
        "token": 3,
        "fence_token": 5,
        "reason": "token 5 has since written to db/migrations",
    }
    assert fence_rows(guarded) == [(RESOURCE, 5)]


def test_claim_accepts_equal_and_higher_tokens(guarded: psycopg.Connection[Any]) -> None:
    """Equal and higher tokens are accepted; each returns the claiming transaction id."""
    xact = guarded.execute("SELECT fencemigrate.claim('db/migrations', 5)").fetchone()
    assert xact is not None and xact[0] > 0
    guarded.execute("SELECT fencemigrate.claim('db/migrations', 7)")
    assert fence_rows(guarded) == [(RESOURCE, 7)]


@pytest.mark.parametrize("claim", CLAIMS)
@pytest.mark.parametrize("token", ["0", "-1", "NULL", "4611686018427387905"])
def test_claim_rejects_tokens_outside_the_domain(guarded: psycopg.Connection[Any], claim: str, token: str) -> None:
    """claim() refuses a token below 1, NULL or above 2^62 with SQLSTATE 22023; the fence is unchanged."""
    assert refused_claim(guarded, claim, token).sqlstate == "22023"
    assert fence_rows(guarded) == [(RESOURCE, 5)]


@pytest.mark.parametrize("claim", CLAIMS)
def test_claim_refuses_a_token_the_lease_service_never_issued(guarded: psycopg.Connection[Any], claim: str) -> None:
    """On a resource a lease service grants, a token above its last grant was never issued: FM001."""
    # As grants 1 to 5 would leave it (the lease guard lets only a grant move the counter).
    guarded.execute("ALTER TABLE fencemigrate.lease DISABLE TRIGGER lease_no_forged_grant")
    guarded.execute("INSERT INTO fencemigrate.lease (resource, token) VALUES ('db/migrations', 5)")
    guarded.execute("ALTER TABLE fencemigrate.lease ENABLE TRIGGER lease_no_forged_grant")
    guarded.execute("UPDATE fencemigrate.agent_fence SET token_source = 'lease service'")
    error = refused_claim(guarded, claim, "6")
    assert error.sqlstate == "FM001"
    assert error.diag.message_detail is not None
    assert json.loads(error.diag.message_detail)["reason"] == (
        "token 6 was never issued by the lease service for db/migrations (the last token it issued is 5)"
    )
    assert fence_rows(guarded) == [(RESOURCE, 5)]


# -- dump and restore (issue 24, 8(e)) ---------------------------------------------------------


def dump_and_restore(source_url: str, target_url: str, *pg_dump_args: str) -> None:
    """``pg_dump SOURCE | psql TARGET``, as an operator restores a database; psql stops at an error."""
    libpq = [url.replace("postgresql+psycopg://", "postgresql://") for url in (source_url, target_url)]
    dump = subprocess.run(["pg_dump", *pg_dump_args, libpq[0]], capture_output=True, text=True, check=True)
    restore = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", libpq[1]], input=dump.stdout, capture_output=True, text=True
    )
    assert restore.returncode == 0, restore.stderr


def two_holders_then_restored(
    pg_conn: psycopg.Connection[Any], pg_url: str, project: Project, make_project: MakeProject, restored: str
) -> Project:
    """The extension fences the database: agent-A is granted token 1 and released, agent-B token 2
    applies a1 and releases; the database is dumped and restored into ``restored``: agent-A's checkout there."""
    pg_conn.execute("CREATE SCHEMA fencemigrate")
    pg_conn.execute("CREATE EXTENSION fencemigrate SCHEMA fencemigrate")
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    project.run_cli("lease", "acquire", "--holder", "agent-A").check(0)
    project.run_cli("lease", "release", "--holder", "agent-A").check(0)
    project.run_cli("lease", "acquire", "--holder", "agent-B").check(0)
    project.run_cli("upgrade", "a1", "--token", "2", "--holder", "agent-B").check(0)
    project.run_cli("lease", "release", "--holder", "agent-B").check(0)
    stale = make_project(url=restored, name="restored")
    stale.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    stale.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    return stale


def test_a_restored_extension_keeps_its_fence_and_moves_to_a_new_epoch(
    extension_dir: Path,
    pg_conn: psycopg.Connection[Any],
    pg_url: str,
    pg_server: PgServer,
    project: Project,
    make_project: MakeProject,
) -> None:
    """pg_dump | psql into a new database: the fence tables come along (the extension marks them for
    pg_dump), the guards accept the restore's COPY, the stale agent-A's token 1 is FENCED there, and
    the next grant issues its token from a new epoch (the restored database is another incarnation)."""
    with scratch_database(pg_conn, pg_server, "restored") as restored:
        stale = two_holders_then_restored(pg_conn, pg_url, project, make_project, restored)
        dump_and_restore(pg_url, restored)
        assert query(restored, "SELECT resource, token, token_source FROM fencemigrate.agent_fence") == [
            (RESOURCE, 2, "lease service")
        ]
        assert_fenced(stale.run_cli("upgrade", "head", "--token", "1", "--holder", "agent-A"), token=1, fence=2)
        assert alembic_versions(restored) == ["a1"]
        assert table_names(restored) == ["alembic_version", "t1"]
        assert stale.run_alembic("upgrade", "head").code != 0  # the version table's guard came along too
        granted = json.loads(stale.run_cli("lease", "acquire", "--holder", "agent-C", "--json").check(0).stdout)
        assert (granted["lease"]["token"], granted["lease"]["new_epoch"]) == (2**32, True)  # ((2 >> 32) + 1) << 32


def test_a_restore_without_the_fence_rows_lets_the_stale_holder_write(
    extension_dir: Path,
    pg_conn: psycopg.Connection[Any],
    pg_url: str,
    pg_server: PgServer,
    project: Project,
    make_project: MakeProject,
) -> None:
    """Control: restored without the fence tables' rows (as pg_dump left the extension's tables out
    before fence schema 0.10), the tokens start again at 1 and the stale agent-A applies b2."""
    with scratch_database(pg_conn, pg_server, "restored") as restored:
        stale = two_holders_then_restored(pg_conn, pg_url, project, make_project, restored)
        dump_and_restore(pg_url, restored, "--exclude-table-data=fencemigrate.*")
        assert query(restored, "SELECT count(*) FROM fencemigrate.agent_fence") == [(0,)]
        stale.run_cli("upgrade", "head", "--token", "1", "--holder", "agent-A").check(0)
        assert alembic_versions(restored) == ["b2"]


def test_a_restored_extension_keeps_the_recorded_redis_grant(
    extension_dir: Path,
    pg_conn: psycopg.Connection[Any],
    pg_url: str,
    pg_server: PgServer,
    project: Project,
    make_project: MakeProject,
    redis_url: str,
) -> None:
    """pg_dump | psql of a database whose fence takes its tokens from Redis: the restore's COPY loads
    agent_fence before redis_grant (the owner may insert a fence row as it was), the recorded grant
    comes along, so the fence still cannot be raised above it by hand there, and the next Redis grant
    on the restored database moves to a new epoch (another incarnation) and records it."""
    with scratch_database(pg_conn, pg_server, "restored") as restored:
        pg_conn.execute("CREATE SCHEMA fencemigrate")
        pg_conn.execute("CREATE EXTENSION fencemigrate SCHEMA fencemigrate")
        project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
        project.run_cli("lease", "acquire", "--holder", "agent-A", "--lease-url", redis_url).check(0)
        project.run_cli("upgrade", "a1", "--token", "1", "--holder", "agent-A").check(0)
        project.run_cli("lease", "release", "--holder", "agent-A", "--lease-url", redis_url).check(0)
        dump_and_restore(pg_url, restored)
        assert query(restored, "SELECT resource, token, token_source FROM fencemigrate.agent_fence") == [
            (RESOURCE, 1, "redis")
        ]
        assert query(restored, "SELECT resource, token FROM fencemigrate.redis_grant") == [(RESOURCE, 1)]
        with pytest.raises(psycopg.Error) as raised:
            query(restored, "UPDATE fencemigrate.agent_fence SET token = 777")
        assert raised.value.sqlstate == "FM006", raised.value
        stale = make_project(url=restored, name="restored")
        granted = json.loads(
            stale.run_cli("lease", "acquire", "--holder", "agent-B", "--lease-url", redis_url, "--json").check(0).stdout
        )
        assert (granted["lease"]["token"], granted["lease"]["new_epoch"]) == (2**32, True)
        assert query(restored, "SELECT resource, token FROM fencemigrate.redis_grant") == [(RESOURCE, 2**32)]

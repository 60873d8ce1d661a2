"""What proves a claim to the version table's guard on PostgreSQL (fence schema 0.7).

A claim notes its transaction in the transaction-local setting ``fencemigrate.claimed_xact``; the
guard on Alembic's version table reads it (and falls back to the claim lock in ``pg_locks``, which
pre-check mode holds at session level). A write of the version row is also what the COMMIT check
of ``transaction_per_migration`` waits for, so that check has nothing left to search for when the
guard saw the write. These tests pin down that the cheaper proof is no weaker than the lock: it
does not outlive its transaction or a rolled-back savepoint, and another transaction's id does not
pass. Control: the same writes go through on a version table whose guard was removed on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support.db import alembic_versions, libpq_url, table_names
from support.project import Project

REFUSED = "carries no fencing token"
_WRITE = "UPDATE alembic_version SET version_num = version_num"


@pytest.fixture
def fenced(project: Project) -> Project:
    """A PostgreSQL project fenced at token 5, its version table guarded."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--token", "5").check(0)
    return project


@pytest.fixture
def connection(fenced: Project) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(libpq_url(fenced.url)) as conn:
        yield conn


def write_refused(conn: psycopg.Connection[Any]) -> bool:
    """Write the version row in the current transaction; True when the guard refused it (rolled back)."""
    try:
        conn.execute(_WRITE)
    except psycopg.Error as error:
        assert error.sqlstate == "FM005" and REFUSED in str(error), error
        conn.rollback()
        return True
    conn.commit()
    return False


def test_a_claim_in_the_same_transaction_proves_the_write(connection: psycopg.Connection[Any]) -> None:
    connection.execute("SELECT fencemigrate.claim('db/migrations', 5)")
    assert not write_refused(connection)


def test_a_claim_does_not_outlive_its_transaction(connection: psycopg.Connection[Any]) -> None:
    connection.execute("SELECT fencemigrate.claim('db/migrations', 5)")
    connection.commit()
    assert write_refused(connection)


def test_a_claim_rolled_back_to_a_savepoint_proves_nothing(connection: psycopg.Connection[Any]) -> None:
    connection.execute("SAVEPOINT before_claim")
    connection.execute("SELECT fencemigrate.claim('db/migrations', 5)")
    connection.execute("ROLLBACK TO SAVEPOINT before_claim")
    assert write_refused(connection)


def test_another_transactions_id_in_the_setting_proves_nothing(connection: psycopg.Connection[Any]) -> None:
    row = connection.execute("SELECT fencemigrate.claim('db/migrations', 5)").fetchone()
    assert row is not None
    connection.commit()
    connection.execute("SELECT set_config('fencemigrate.claimed_xact', %s, true)", (str(row[0]),))
    assert write_refused(connection)


def test_a_fenced_claim_proves_nothing(connection: psycopg.Connection[Any]) -> None:
    """A stale token's claim raises FENCED; a writer that carries on in a savepoint has no proof."""
    connection.execute("SAVEPOINT stale")
    with pytest.raises(psycopg.Error) as fenced:
        connection.execute("SELECT fencemigrate.claim('db/migrations', 4)")
    assert fenced.value.sqlstate == "FM001"
    connection.execute("ROLLBACK TO SAVEPOINT stale")
    assert write_refused(connection)


def test_control_the_same_writes_pass_once_the_guard_is_removed(fenced: Project) -> None:
    fenced.allow_tokenless_writes()
    with psycopg.connect(libpq_url(fenced.url)) as conn:
        conn.execute("SELECT fencemigrate.claim('db/migrations', 5)")
        conn.commit()
        assert not write_refused(conn)


_RAW_COMMIT = """
op.execute("CREATE TABLE before_raw_commit (id int)")
op.get_bind().connection.commit()  # straight to the DBAPI connection: SQLAlchemy sees nothing
op.execute("CREATE TABLE after_raw_commit (id int)")
"""


def test_commit_check_still_searches_an_unguarded_version_table(project: Project) -> None:
    """Without the guard (tokenless writes allowed) nothing drops the pending check when the version
    row is written, so COMMIT searches the version table as before 0.7: a revision committing
    through the raw DBAPI connection is still refused at that commit (FM003), the one before it kept."""
    project.set_env_option("transaction_per_migration", True)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "head", "--token", "5").check(0)
    project.allow_tokenless_writes()
    project.add_revision("b2", "a1", (), slug="raw", extra_upgrade_code=_RAW_COMMIT)
    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")

    result = project.run_cli("upgrade", "head", "--token", "5")
    result.check(1)
    assert "committed its transaction before Alembic recorded it" in result.stderr
    assert table_names(project.url) == ["alembic_version", "t1"]
    assert alembic_versions(project.url) == ["a1"]

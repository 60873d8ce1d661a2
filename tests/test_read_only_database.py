"""A read-only database (PostgreSQL's ``default_transaction_read_only``, a SQLite file opened
``mode=ro``): every write is one line naming the step the database refused (the install of the
fence schema, the lease grant, renewal or release, the fence claim) and why, exit 1, nothing
changed. Before, it was ``database error: cannot execute INSERT in a read-only transaction``,
which names neither."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.db import alembic_versions, execute, query, table_exists
from support.fence_rows import stderr_lines
from support.mysql_server import mysql_rows
from support.project import MakeProject, Project, Result
from support.sqlite_rows import make_sqlite_project, snapshot

from fencemigrate.dialects import dialect_for
from fencemigrate.errors import read_only_reason

PG_READ_ONLY = (
    "cannot execute {statement} in a read-only transaction (default_transaction_read_only is on for this "
    "role or database, or the server is a hot standby)"
)
SQLITE_READ_ONLY = (
    "attempt to write a readonly database (this process may not write the database file or its "
    "directory, or the URL opens it with mode=ro)"
)


def refused(result: Result, step: str, reason: str) -> None:
    """Exit 1 with the one line (and the same in JSON, with ``step`` and ``reason``)."""
    assert result.code == 1, result
    assert stderr_lines(result.stderr) == [
        f"fencemigrate: error: read-only database: {step} was refused: {reason}; nothing was changed"
    ], result


def refused_json(result: Result, step: str, reason: str) -> None:
    assert result.code == 1, result
    assert json.loads(result.stdout) == {
        "status": "error",
        "message": f"read-only database: {step} was refused: {reason}; nothing was changed",
        "step": step,
        "reason": reason,
    }, result


def fenced_tables(url: str) -> list[tuple[Any, ...]]:
    """The fence schema's rows that a write would change."""
    if not query(url, "SELECT 1 FROM pg_namespace WHERE nspname = 'fencemigrate'"):
        return []
    return query(url, "SELECT resource, token, holder FROM fencemigrate.lease") + query(
        url, "SELECT resource, token FROM fencemigrate.agent_fence"
    )


@pytest.fixture
def pg_project(make_project: MakeProject) -> Project:
    project = make_project()
    project.add_revision("0001", None, ["CREATE TABLE t1 (id int)"], ["DROP TABLE t1"])
    return project


def read_only(pg_dbname: str, url: str) -> None:
    execute(url, f'ALTER DATABASE "{pg_dbname}" SET default_transaction_read_only = on')


def test_postgresql_without_the_fence_schema_names_its_install(pg_project: Project, pg_dbname: str) -> None:
    read_only(pg_dbname, pg_project.url)
    refused(
        pg_project.run_cli("upgrade", "head"),
        "the install of the fence schema",
        PG_READ_ONLY.format(statement="CREATE SCHEMA"),
    )
    refused(
        pg_project.run_cli("upgrade", "head", "--token", "5"),
        "the install of the fence schema",
        PG_READ_ONLY.format(statement="CREATE SCHEMA"),
    )
    assert fenced_tables(pg_project.url) == []


def test_postgresql_names_the_grant_the_renewal_and_the_claim(pg_project: Project, pg_dbname: str) -> None:
    pg_project.run_cli("lease", "acquire", "--holder", "agent-A", "--ttl", "5m").check(0)
    before = fenced_tables(pg_project.url)
    read_only(pg_dbname, pg_project.url)

    refused(pg_project.run_cli("upgrade", "head"), "the lease grant", PG_READ_ONLY.format(statement="INSERT"))
    refused(
        pg_project.run_cli("lease", "acquire", "--holder", "agent-B"),
        "the lease grant",
        PG_READ_ONLY.format(statement="INSERT"),
    )
    refused(
        pg_project.run_cli("lease", "renew", "--holder", "agent-A"),
        "the lease renewal",
        PG_READ_ONLY.format(statement="UPDATE"),
    )
    claim = PG_READ_ONLY.format(statement="SELECT FOR UPDATE")
    refused(pg_project.run_cli("upgrade", "head", "--token", "1"), "the fence claim", claim)
    refused_json(pg_project.run_cli("stamp", "head", "--token", "1", "--json"), "the fence claim", claim)
    assert fenced_tables(pg_project.url) == before
    assert not table_exists(pg_project.url, "t1") and not alembic_versions(pg_project.url)


def test_sqlite_opened_read_only_names_the_grant_the_release_and_the_claim(tmp_path: Path) -> None:
    project = make_sqlite_project(tmp_path)
    project.add_revision("0001", None, ["CREATE TABLE t1 (id int)"], ["DROP TABLE t1"])
    project.run_cli("lease", "acquire", "--holder", "agent-A", "--ttl", "5m").check(0)
    database = tmp_path / "db.sqlite"
    before = snapshot(database)
    project.set_url(f"sqlite:///file:{database}?mode=ro&uri=true")

    refused(project.run_cli("upgrade", "head"), "the lease grant", SQLITE_READ_ONLY)
    refused(project.run_cli("lease", "release", "--holder", "agent-A"), "the lease release", SQLITE_READ_ONLY)
    refused(project.run_cli("upgrade", "head", "--token", "1"), "the fence claim", SQLITE_READ_ONLY)
    assert snapshot(database) == before


def test_mysql_refusals_read_as_read_only_by_their_error_number(mysql_url: str) -> None:
    """MySQL's read-only errors, raised by the server through PyMySQL: ``--read-only`` is not needed to
    tell them; a READ ONLY transaction's (1792) carries SQLSTATE 25006, PostgreSQL's read-only code,
    and is MySQL's all the same. Another error is none."""
    import pymysql

    dialect_for("mysql"), dialect_for("postgresql")  # both readers loaded: they must not overlap
    hint = "the server runs with read_only (or super_read_only), or the transaction is READ ONLY"
    with pytest.raises(pymysql.err.MySQLError) as raised:
        mysql_rows(
            mysql_url, "BEGIN NOT ATOMIC SIGNAL SQLSTATE '25006' SET MYSQL_ERRNO = 1792, MESSAGE_TEXT = 'no'; END"
        )
    assert raised.value.args == (1792, "no") and raised.value.sqlstate == "25006"
    assert read_only_reason(raised.value) == f"no ({hint})"
    with pytest.raises(pymysql.err.MySQLError) as other:
        mysql_rows(mysql_url, "SELECT * FROM no_such_table")
    assert read_only_reason(other.value) is None

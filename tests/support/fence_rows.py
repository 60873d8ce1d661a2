"""Read fencemigrate's own rows (fence tokens, ledger) straight from a test database.

Shared by the incident, atomicity, race and property tests. Everything here reads with
:func:`support.db.query`, i.e. a short-lived autocommit connection, so it sees only what
has been committed. Nothing here imports fencemigrate: the tests check the database,
not the package's own view of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import count
from typing import Any

import psycopg
from psycopg import sql as pgsql

from support.db import alembic_versions, query, schema_names, table_exists
from support.pg import PgServer
from support.project import Result

FENCE_SCHEMA = "fencemigrate"
RESOURCE = "db/migrations"
VERSION_TABLE = "alembic_version"
#: The tables of the fence schema (version 1.0), sorted.
FENCE_TABLES = [
    "agent_fence",
    "applied_revision",
    "claim_proof",
    "fence_event",
    "lease",
    "pending_version_check",
    "redis_grant",
    "resource_lock_key",
    "tokenless_writes_allowed",
]

#: Key lines of the agent message printed when a newer token has written (``{token}``, ``{fence}``).
FENCED_STALE_LINES = (
    "FENCED: you no longer own db/migrations.",
    "Your lease token ({token}) is older than token {fence}, which has since written to this resource.",
    "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
    "Next step: run `fencemigrate state` and re-plan from what is actually there.",
    "If your goal is already met by the current state, report that and stop.",
)

#: Key lines of the agent message printed when a re-apply is not the caller's to make.
FENCED_NOT_YOURS_LINES = (
    "FENCED: this write to db/migrations is not yours to make.",
    "Rejected for token {token}: {reason}.",
    "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
    "Next step: run `fencemigrate state` and re-plan from what is actually there.",
    "If your goal is already met by the current state, report that and stop.",
)


@dataclass(frozen=True)
class LedgerEntry:
    """One row of ``fencemigrate.applied_revision`` (the fields the tests look at)."""

    revision: str
    applied_token: int
    holder: str
    method: str


def fence_installed(url: str) -> bool:
    """True when the fence schema's tables exist in the database."""
    return FENCE_SCHEMA in schema_names(url) and table_exists(url, "agent_fence", FENCE_SCHEMA)


def fence_tokens(url: str) -> dict[str, int]:
    """``{resource: token}`` of every fence row; ``{}`` when the fence schema is not installed."""
    if not fence_installed(url):
        return {}
    rows = query(url, f"SELECT resource, token FROM {FENCE_SCHEMA}.agent_fence ORDER BY resource")
    return {str(resource): int(token) for resource, token in rows}


def fence_token(url: str, resource: str = RESOURCE) -> int | None:
    """The committed fence token of ``resource`` (None if it has no fence row)."""
    return fence_tokens(url).get(resource)


def ledger(url: str, version_table: str = VERSION_TABLE) -> dict[str, LedgerEntry]:
    """``{revision: LedgerEntry}`` for one Alembic version table; ``{}`` when not installed."""
    if not fence_installed(url):
        return {}
    rows = query(
        url,
        f"SELECT revision, applied_token, holder, method FROM {FENCE_SCHEMA}.applied_revision "
        "WHERE version_table = %s ORDER BY revision",
        (version_table,),
    )
    return {str(rev): LedgerEntry(str(rev), int(tok), str(holder), str(method)) for rev, tok, holder, method in rows}


def ledger_tokens(url: str, version_table: str = VERSION_TABLE) -> dict[str, int]:
    """``{revision: applied_token}`` of the ledger."""
    return {rev: entry.applied_token for rev, entry in ledger(url, version_table).items()}


@dataclass(frozen=True)
class Snapshot:
    """Everything a fenced write could change: versions, ledger, fences, user tables (with OIDs)."""

    versions: list[str] | None
    ledger: dict[str, LedgerEntry]
    fences: dict[str, int]
    tables: dict[str, int]


def user_tables(url: str) -> dict[str, int]:
    """``{table: oid}`` of the tables in ``public`` (an OID change means dropped and re-created)."""
    rows = query(
        url,
        "SELECT c.relname, c.oid::bigint FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1",
        (),
    )
    return {str(name): int(oid) for name, oid in rows}


def snapshot(url: str) -> Snapshot:
    """Read a :class:`Snapshot` of the database."""
    return Snapshot(alembic_versions(url), ledger(url), fence_tokens(url), user_tables(url))


_database_counter = count(1)


@contextmanager
def scratch_database(pg_conn: psycopg.Connection[Any], server: PgServer, prefix: str = "fm_extra") -> Iterator[str]:
    """Create an empty database next to the test's own, yield its SQLAlchemy URL, drop it afterwards.

    ``pg_conn`` must be autocommit (the ``pg_conn`` fixture is). The name carries the test
    database's name, so parallel pytest processes cannot collide.
    """
    base = str(pg_conn.info.dbname)
    name = f"{prefix}_{next(_database_counter)}_{base}"[:63]
    ident = pgsql.Identifier(name)
    pg_conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
    pg_conn.execute(pgsql.SQL("CREATE DATABASE {}").format(ident))
    try:
        yield server.url(name)
    finally:
        pg_conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


#: Lines written by the logging setup of Alembic's env.py templates (``fileConfig``):
#: ``%(levelname)-5.5s [%(name)s] %(message)s``, e.g. ``INFO  [alembic.runtime.migration] ...``.
_LOG_LINE = re.compile(r"^(DEBUG|INFO |WARNI|ERROR|CRITI) \[[\w.]+\] ")


def stderr_lines(text: str) -> list[str]:
    """Non-empty lines of a captured stream, right-stripped, without env.py's logging lines."""
    return [line.rstrip() for line in text.splitlines() if line.strip() and not _LOG_LINE.match(line)]


#: A run's progress on stderr: each step as it starts, and each report of a wait for the lease.
PROGRESS_LINE = re.compile(r"(upgrade|downgrade|stamp) .+ \(\d+/\d+\) under token \d+$|waiting for the lease on ")


def without_progress(lines: list[str]) -> list[str]:
    """``lines`` without the run's progress lines."""
    return [line for line in lines if not PROGRESS_LINE.match(line)]


# An audit trigger on the fence table: one row per claim, with the claiming transaction.
# Installed by the tests (not by fencemigrate) after the fence schema exists.
CLAIM_LOG_SQL = """
CREATE SCHEMA audit;
CREATE TABLE audit.claim_log (id serial PRIMARY KEY, xact xid NOT NULL, token bigint NOT NULL);
ALTER FUNCTION fencemigrate.claim(text, bigint) RENAME TO claim_unlogged;
CREATE FUNCTION fencemigrate.claim(p_resource text, p_token bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit.claim_log (xact, token) VALUES (pg_current_xact_id()::xid, p_token);
    RETURN fencemigrate.claim_unlogged(p_resource, p_token);
END $$;
ALTER FUNCTION fencemigrate.claim_and_record(text, bigint, text, regclass, text, text, text, text)
    RENAME TO claim_and_record_unlogged;
CREATE FUNCTION fencemigrate.claim_and_record(
    p_resource text, p_token bigint, p_version_table text, p_version_regclass regclass,
    p_revision text, p_holder text, p_script_sha256 text, p_source text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit.claim_log (xact, token) VALUES (pg_current_xact_id()::xid, p_token);
    RETURN fencemigrate.claim_and_record_unlogged(p_resource, p_token, p_version_table, p_version_regclass,
                                                  p_revision, p_holder, p_script_sha256, p_source);
END $$;
"""


def add_claim_log(url: str) -> None:
    """Wrap ``claim()`` and ``claim_and_record()`` (which claims in its own body) so that every claim,
    from any caller, logs its transaction and token."""
    query(url, CLAIM_LOG_SQL)


def claim_xacts(url: str) -> list[str]:
    """Transactions of the claims logged by CLAIM_LOG_SQL, in order."""
    return [str(r[0]) for r in query(url, "SELECT xact::text FROM audit.claim_log ORDER BY id")]


def assert_fenced(result: Result, token: int, fence: int, granted_only: bool = False) -> None:
    """Exit 3 and the agent message naming both tokens on stderr; ``granted_only``: the newer token
    was granted (or the fence raised by hand) but has not written."""
    result.check(3)
    lines = result.stderr.splitlines()
    news = "was granted after yours (it has not written yet)" if granted_only else "has since written to this resource"
    assert "FENCED: you no longer own db/migrations." in lines, result
    assert f"Your lease token ({token}) is older than token {fence}, which {news}." in lines, result
    assert "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply." in lines, result
    assert "If your goal is already met by the current state, report that and stop." in lines, result

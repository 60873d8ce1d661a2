"""A fenced database whose ledger has a row without its revision file's text (``source`` NULL), as
an adopted revision with no readable file, or a file that is not UTF-8 text, leaves it."""

from __future__ import annotations

import sqlalchemy as sa

from fencemigrate.dialects import dialect_for


def old_ledger_row(url: str, revision: str, sha256: str) -> None:
    """The ledger row of ``revision`` with its sha256 and no text."""
    if url.startswith("postgresql"):
        sql = (
            "SELECT fencemigrate.record_apply('alembic_version', :revision, 'db/migrations', 3, 'old-agent', "
            "'upgrade', :sha)"  # the seven-argument function: no text
        )
    else:
        time = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')" if url.startswith("sqlite") else "UTC_TIMESTAMP(6)"
        sql = (
            "INSERT INTO fencemigrate_applied_revision (version_table, revision, resource, applied_token, holder, "
            f"method, applied_at, script_sha256) VALUES ('alembic_version', :revision, 'db/migrations', 3, "
            f"'old-agent', 'upgrade', {time}, :sha)"
        )
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(sql), {"revision": revision, "sha": sha256})
    finally:
        engine.dispose()


def install_schema(url: str) -> str:
    """The fence schema, installed with no ledger row yet; its version."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            dialect = dialect_for(connection)
            dialect.ensure_installed(connection, connection.dialect.identifier_preparer.quote("fencemigrate"))
            return dialect.schema_version()
    finally:
        engine.dispose()

"""A database fenced at the schema version before the ledger kept each revision's text."""

from __future__ import annotations

import sqlalchemy as sa

from fencemigrate.dialects import mysql_schema, sqlite_schema
from fencemigrate.dialects.postgresql_schema import install_script


def old_ledger_row(url: str, revision: str, sha256: str) -> None:
    """The ledger row of ``revision`` as fencemigrate wrote it before the text was kept."""
    if url.startswith("postgresql"):
        sql = (
            "SELECT fencemigrate.record_apply('alembic_version', :revision, 'db/migrations', 3, 'old-agent', "
            "'upgrade', :sha)"  # 0.7's function: seven arguments
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


def install_old_schema(url: str) -> str:
    """The fence schema at the version before the text was kept; that version."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            if url.startswith("postgresql"):
                connection.exec_driver_sql(
                    install_script('"fencemigrate"', "0.7"), execution_options={"no_parameters": True}
                )
                return "0.7"
            schema = sqlite_schema if url.startswith("sqlite") else mysql_schema
            for sql in schema.install_statements(
                '"fencemigrate"' if schema is sqlite_schema else "`fencemigrate`", "0.5"
            ):
                connection.exec_driver_sql(sql, execution_options={"no_parameters": True})
            return "0.5"
    finally:
        engine.dispose()

"""Each database's full install script creates exactly what its oldest script and the update chain create.

A fresh install runs the current version's full script (``sql/fencemigrate--0.12.sql``,
``sql/sqlite/fencemigrate--0.8.sql``, ``sql/mysql/fencemigrate--0.8.sql``); a database installed
at an older version is brought to the current one by the update scripts. Both must end with the
same catalog: tables, columns and their types (on PostgreSQL also their storage and compression:
the ledger's ``source`` is lz4 where the server has it), defaults and constraints, indexes,
functions with their bodies, triggers (and their order, where the database fires them in creation
order), comments, extension membership, the version row. Each test installs both ways side by side and compares.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from support.db import connect
from support.pg import PgServer

from fencemigrate.config import sql_dir
from fencemigrate.dialects import mysql_schema, sqlite_schema
from fencemigrate.dialects.postgresql_schema import default_version, install_script, update_script

PG_OLDEST = "0.1"
FULL, CHAIN = "fence_by_full_script", "fence_by_update_chain"  # where each install goes
PLACEHOLDER = "@extschema@"


# -- PostgreSQL --------------------------------------------------------------------------------

PG_CATALOG = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.reloptions, c.relacl::text,
               obj_description(c.oid, 'pg_class')
          FROM pg_class c WHERE c.relnamespace = %(schema)s::regnamespace ORDER BY c.relname""",
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, a.attcollation,
               a.attacl::text, col_description(c.oid, a.attnum), a.attstorage, a.attcompression
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE c.relnamespace = %(schema)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY c.relname, a.attnum""",
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid), k.convalidated,
               k.condeferrable, k.condeferred
          FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
         WHERE k.connamespace = %(schema)s::regnamespace ORDER BY c.relname, k.conname""",
    "indexes": """
        SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid)
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE c.relnamespace = %(schema)s::regnamespace ORDER BY 1""",
    "sequences": """
        SELECT c.relname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmax, s.seqmin,
               s.seqcache, s.seqcycle
          FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
         WHERE c.relnamespace = %(schema)s::regnamespace ORDER BY c.relname""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid),
               p.prosrc, p.proacl::text, obj_description(p.oid, 'pg_proc')
          FROM pg_proc p WHERE p.pronamespace = %(schema)s::regnamespace ORDER BY 1, 2""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = %(schema)s::regnamespace AND NOT t.tgisinternal ORDER BY 1, 2""",
    "schema": """
        SELECT n.nspacl::text, obj_description(n.oid, 'pg_namespace')
          FROM pg_namespace n WHERE n.oid = %(schema)s::regnamespace""",
    "version": "SELECT {schema}.schema_version()",
}

EXTENSION_MEMBERS = """
    SELECT pg_describe_object(d.classid, d.objid, d.objsubid) FROM pg_depend d
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
       AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'fencemigrate')
     ORDER BY 1"""


def pg_catalog(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the fence schema ``schema`` holds, by kind, with its name replaced by ``@extschema@``."""
    return {
        kind: _placeheld(
            conn.execute(
                sql.replace("{schema}", schema), {"schema": schema} if "%(schema)s" in sql else None
            ).fetchall(),
            schema,
        )
        for kind, sql in PG_CATALOG.items()
    }


def _placeheld(rows: list[tuple[Any, ...]], schema: str) -> list[tuple[Any, ...]]:
    return [
        tuple(value.replace(schema, PLACEHOLDER) if isinstance(value, str) else value for value in row) for row in rows
    ]


def pg_dump_schema(server: PgServer, dbname: str, schema: str) -> list[str]:
    """``pg_dump --schema-only`` of ``schema``, without comments, settings and blank lines, the schema
    named ``@extschema@``."""
    dump = subprocess.run(
        [
            "pg_dump",
            "--schema-only",
            "--no-owner",
            "-h",
            server.host,
            "-p",
            str(server.port),
            "-U",
            server.user,
            "-n",
            schema,
            dbname,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    skipped = re.compile(r"^(--|SET |SELECT pg_catalog\.set_config|\\(un)?restrict |\s*$)")
    return [line.replace(schema, PLACEHOLDER) for line in dump.splitlines() if not skipped.match(line)]


def test_postgresql_full_script_and_update_chain_install_the_same_schema(
    pg_conn: psycopg.Connection[Any], pg_server: PgServer, pg_dbname: str
) -> None:
    """The runner's fresh install (the 0.12 script) and 0.1 plus the updates: the same catalog and dump;
    the ledger's ``source`` compressed with lz4 when the server has it."""
    pg_conn.execute(install_script(f'"{FULL}"'))
    chain = update_script(f'"{CHAIN}"', PG_OLDEST)
    assert chain  # the oldest version is not the current one: there is a chain to compare with
    pg_conn.execute(install_script(f'"{CHAIN}"', PG_OLDEST))
    assert pg_conn.execute(f"SELECT {CHAIN}.schema_version()").fetchone() == (PG_OLDEST,)
    pg_conn.execute(chain)

    full = pg_catalog(pg_conn, FULL)
    assert full["version"] == [(default_version(),)]
    assert len(full["functions"]) > 20 and len(full["triggers"]) > 5  # the queries see the schema
    assert full == pg_catalog(pg_conn, CHAIN)
    assert pg_dump_schema(pg_server, pg_dbname, FULL) == pg_dump_schema(pg_server, pg_dbname, CHAIN)
    has_lz4 = pg_conn.execute(
        "SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    ).fetchone()
    compression = pg_conn.execute(
        f"SELECT attcompression FROM pg_attribute WHERE attrelid = '\"{FULL}\".applied_revision'::regclass "
        "AND attname = 'source'"
    ).fetchone()
    assert compression == ("l" if has_lz4 == (True,) else "",)


@pytest.fixture
def extension_files(pg_conn: psycopg.Connection[Any]) -> Iterator[Path]:
    """The extension's files copied into the server's extension directory, restored afterwards."""
    row = pg_conn.execute("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'").fetchone()
    assert row is not None
    directory = Path(row[0]) / "extension"
    if not (directory.is_dir() and os.access(directory, os.W_OK)):
        reason = f"the server's extension directory {directory} is not writable: cannot install the extension files"
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(reason + " (CI=true: this must not be skipped)")
        pytest.skip(reason)
    names = sorted(path.name for path in sql_dir().glob("fencemigrate*") if path.suffix in (".control", ".sql"))
    saved = {name: (directory / name).read_bytes() for name in names if (directory / name).exists()}
    for name in names:
        shutil.copyfile(sql_dir() / name, directory / name)
    try:
        yield directory
    finally:
        for name in names:
            if name in saved:
                (directory / name).write_bytes(saved[name])
            else:
                (directory / name).unlink(missing_ok=True)


@pytest.fixture
def second_database(pg_conn: psycopg.Connection[Any], pg_server: PgServer, pg_dbname: str) -> Iterator[str]:
    """Another empty database on the test server (an extension exists once per database)."""
    name = f"{pg_dbname}_chain"
    pg_conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
    pg_conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_server.url(name)
    finally:
        pg_conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_create_extension_runs_the_full_script_and_alter_extension_update_reaches_the_same_schema(
    extension_files: Path, pg_conn: psycopg.Connection[Any], second_database: str
) -> None:
    """CREATE EXTENSION at the default version runs fencemigrate--0.12.sql alone; CREATE EXTENSION at
    0.1 and ALTER EXTENSION UPDATE run the chain: the same catalog, the same extension members."""
    pg_conn.execute("CREATE SCHEMA fencemigrate")
    pg_conn.execute("CREATE EXTENSION fencemigrate SCHEMA fencemigrate")
    with connect(second_database) as chained:
        chained.execute("CREATE SCHEMA fencemigrate")
        chained.execute(f"CREATE EXTENSION fencemigrate SCHEMA fencemigrate VERSION '{PG_OLDEST}'")
        chained.execute("ALTER EXTENSION fencemigrate UPDATE")
        by_chain = pg_catalog(chained, "fencemigrate"), chained.execute(EXTENSION_MEMBERS).fetchall()
        # The chain created lease (0.2) before never_issued() (0.4); object ids tell the order.
        assert chained.execute(
            "SELECT 'fencemigrate.never_issued'::regproc::oid > 'fencemigrate.lease'::regclass::oid"
        ).fetchone() == (True,)
    assert pg_conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'fencemigrate'").fetchone() == (
        default_version(),
    )
    # The full script creates never_issued() with the claim, before the lease table: it ran, not the chain.
    assert pg_conn.execute(
        "SELECT 'fencemigrate.never_issued'::regproc::oid < 'fencemigrate.lease'::regclass::oid"
    ).fetchone() == (True,)
    by_full = pg_catalog(pg_conn, "fencemigrate"), pg_conn.execute(EXTENSION_MEMBERS).fetchall()
    assert len(by_full[1]) > 30
    assert by_full == by_chain


# -- SQLite ------------------------------------------------------------------------------------


def sqlite_catalog(path: Path, prefix: str) -> dict[str, Any]:
    """What the fence schema prefixed ``prefix`` holds, the prefix replaced by ``@extschema@``:
    sqlite_master (the stored text, as ``.schema`` shows it), each table's triggers in creation
    order (SQLite fires them in reverse creation order), each table's columns, the version row."""
    with closing(sqlite3.connect(path)) as conn:
        objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid").fetchall()
        triggers: dict[str, list[str]] = {}
        for kind, name, table, _ in _placeheld(objects, prefix):
            if kind == "trigger":
                triggers.setdefault(table, []).append(name)
        catalog: dict[str, Any] = {
            "objects": sorted(_placeheld(objects, prefix)),
            "trigger_order": triggers,
            "columns": {
                name.replace(prefix, PLACEHOLDER): conn.execute(f'PRAGMA table_xinfo("{name}")').fetchall()
                for kind, name, *_ in objects
                if kind == "table"
            },
            "version": conn.execute(f'SELECT one_row, version FROM "{prefix}_schema_version"').fetchall(),
        }
    return catalog


def test_sqlite_full_script_and_update_chain_install_the_same_schema(tmp_path: Path) -> None:
    """The 0.8 script and 0.2 plus the updates: the same sqlite_master (text and order) and columns."""
    full, chain = tmp_path / "full.sqlite", tmp_path / "chain.sqlite"
    with closing(sqlite3.connect(full)) as conn:
        for sql in sqlite_schema.install_statements(f'"{FULL}"'):
            conn.execute(sql)
        conn.commit()
    with closing(sqlite3.connect(chain)) as conn:
        for sql in sqlite_schema.install_statements(f'"{CHAIN}"', sqlite_schema.BASE_VERSION):
            conn.execute(sql)
        assert conn.execute(f'SELECT version FROM "{CHAIN}_schema_version"').fetchall() == [
            (sqlite_schema.BASE_VERSION,)
        ]
        for sql in sqlite_schema.install_statements(f'"{CHAIN}"', start=sqlite_schema.BASE_VERSION):
            conn.execute(sql)
        conn.commit()

    by_full = sqlite_catalog(full, FULL)
    assert by_full["version"] == [(1, sqlite_schema.VERSION)]
    assert len([kind for kind, *_ in by_full["objects"] if kind == "trigger"]) > 20
    assert by_full == sqlite_catalog(chain, CHAIN)


# -- MariaDB -----------------------------------------------------------------------------------

MYSQL_CATALOG = {
    "tables": """
        SELECT TABLE_NAME, TABLE_TYPE, ENGINE, TABLE_COLLATION, CREATE_OPTIONS, TABLE_COMMENT
          FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE :prefix
         ORDER BY TABLE_NAME""",
    "columns": """
        SELECT TABLE_NAME, ORDINAL_POSITION, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT,
               CHARACTER_SET_NAME, COLLATION_NAME, EXTRA, COLUMN_COMMENT
          FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE :prefix
         ORDER BY TABLE_NAME, ORDINAL_POSITION""",
    "indexes": """
        SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE, INDEX_TYPE
          FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE :prefix
         ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX""",
    "checks": """
        SELECT TABLE_NAME, CONSTRAINT_NAME, CHECK_CLAUSE
          FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME LIKE :prefix
         ORDER BY TABLE_NAME, CONSTRAINT_NAME""",
    "triggers": """
        SELECT EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER, TRIGGER_NAME,
               ACTION_STATEMENT, SQL_MODE, DEFINER
          FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME LIKE :prefix
         ORDER BY EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER""",
    "routines": """
        SELECT ROUTINE_NAME, ROUTINE_DEFINITION FROM information_schema.ROUTINES
         WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE :prefix ORDER BY ROUTINE_NAME""",
}


def mysql_catalog(url: str, prefix: str) -> dict[str, Any]:
    """What the fence schema prefixed ``prefix`` holds (information_schema, SHOW CREATE TABLE and
    TRIGGER), the prefix replaced by ``@extschema@``."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            like = {"prefix": prefix.replace("_", "\\_") + "\\_%"}
            catalog: dict[str, Any] = {
                kind: _placeheld([tuple(row) for row in conn.execute(text(sql), like)], prefix)
                for kind, sql in MYSQL_CATALOG.items()
            }
            tables = [row[0].replace(PLACEHOLDER, prefix) for row in catalog["tables"]]
            triggers = [row[4].replace(PLACEHOLDER, prefix) for row in catalog["triggers"]]
            catalog["show_create_table"] = [
                conn.execute(text(f"SHOW CREATE TABLE `{name}`")).one()[1].replace(prefix, PLACEHOLDER)
                for name in tables
            ]
            catalog["show_create_trigger"] = [
                conn.execute(text(f"SHOW CREATE TRIGGER `{name}`")).one()[2].replace(prefix, PLACEHOLDER)
                for name in triggers
            ]
            catalog["version"] = conn.execute(text(f"SELECT one_row, version FROM `{prefix}_schema_version`")).all()
    finally:
        engine.dispose()
    return catalog


def test_mysql_full_script_and_update_chain_install_the_same_schema(mysql_url: str) -> None:
    """The 0.8 script and 0.3 plus the updates, on MariaDB: the same information_schema and SHOW CREATE."""
    engine = create_engine(mysql_url)
    try:
        with engine.connect() as conn:
            for sql in mysql_schema.install_statements(f"`{FULL}`"):
                conn.exec_driver_sql(sql, execution_options={"no_parameters": True})
            for sql in mysql_schema.install_statements(f"`{CHAIN}`", mysql_schema.BASE_VERSION):
                conn.exec_driver_sql(sql, execution_options={"no_parameters": True})
            assert conn.execute(text(f"SELECT version FROM `{CHAIN}_schema_version`")).all() == [
                (mysql_schema.BASE_VERSION,)
            ]
            for sql in mysql_schema.install_statements(f"`{CHAIN}`", start=mysql_schema.BASE_VERSION):
                conn.exec_driver_sql(sql, execution_options={"no_parameters": True})
            conn.commit()
    finally:
        engine.dispose()

    by_full = mysql_catalog(mysql_url, FULL)
    assert by_full["version"] == [(1, mysql_schema.VERSION)]
    assert len(by_full["triggers"]) > 10 and len(by_full["checks"]) > 10
    assert by_full == mysql_catalog(mysql_url, CHAIN)

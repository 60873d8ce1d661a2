"""The fence schema's upgrade mechanism (:class:`~fencemigrate.dialects.base.SchemaScripts`), kept
alive by a synthetic upgrade while no real one ships.

``tests/support/schema_upgrade/`` holds one upgrade script per database, from ``@FROM@`` to ``@TO@``:
a harmless new table and the new version. Each test copies the shipped scripts, adds that script
from the current version to the next minor one, and points the dialect at the copy: a fence schema
installed by a fenced run is upgraded in place (its fence and ledger rows kept), and a fresh install
at the new version runs the current full script and the upgrade.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support.backend_rows import table
from support.in_process import run_in_process
from support.project import MakeProject

from fencemigrate.dialects import dialect_for
from fencemigrate.dialects.base import SchemaScripts

FIXTURE = Path(__file__).parent / "support" / "schema_upgrade"
SCRIPT = "fencemigrate--@FROM@--@TO@.sql"


@pytest.fixture
def upgrade(backend: str, tmp_path: Path) -> SchemaScripts:
    """The shipped scripts of ``backend``, copied, plus the synthetic upgrade to the next minor version."""
    shipped = dialect_for(backend).schema_scripts()
    major, minor = shipped.version.split(".")
    target = f"{major}.{int(minor) + 1}"
    directory = tmp_path / "scripts"
    shutil.copytree(shipped.directory, directory, ignore=shutil.ignore_patterns("queries"))
    source = FIXTURE / ("" if backend == "postgresql" else backend) / SCRIPT
    text = source.read_text(encoding="utf-8").replace("@FROM@", shipped.version).replace("@TO@", target)
    (directory / f"fencemigrate--{shipped.version}--{target}.sql").write_text(text, encoding="utf-8")
    return SchemaScripts(directory, target)


def quoted(engine: sa.Engine) -> str:
    return str(engine.dialect.identifier_preparer.quote("fencemigrate"))


def fence_rows(backend: str, connection: sa.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        name: [tuple(row) for row in connection.execute(sa.text(f"SELECT * FROM {table(backend, name)} ORDER BY 1"))]
        for name in ("agent_fence", "applied_revision", "fence_event")
    }


def test_a_fenced_run_s_schema_is_upgraded_in_place(
    backend: str, backend_url: str, make_project: MakeProject, upgrade: SchemaScripts
) -> None:
    project = make_project(url=backend_url)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    run_in_process(project.path, "upgrade", "head", "--token", "5", "--holder", "agent-A").check(0)
    dialect = dialect_for(backend)
    engine = sa.create_engine(backend_url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            before = fence_rows(backend, connection)
        assert before["agent_fence"] and before["applied_revision"]

        with engine.begin() as connection:
            assert dialect.ensure_installed(connection, quoted(engine), upgrade) is True
        with engine.begin() as connection:
            assert dialect.ensure_installed(connection, quoted(engine), upgrade) is False
            assert dialect.installed_version(connection, quoted(engine)) == upgrade.version
            assert connection.execute(sa.text(f"SELECT count(*) FROM {table(backend, 'upgrade_probe')}")).scalar() == 0
            assert fence_rows(backend, connection) == before
    finally:
        engine.dispose()


def test_a_fresh_install_runs_the_full_script_and_the_upgrade(
    backend: str, backend_url: str, upgrade: SchemaScripts
) -> None:
    shipped = dialect_for(backend).schema_scripts()
    assert [path.name for path in upgrade.paths(None) or []] == [
        f"fencemigrate--{shipped.version}.sql",
        f"fencemigrate--{shipped.version}--{upgrade.version}.sql",
    ]
    dialect = dialect_for(backend)
    engine = sa.create_engine(backend_url, poolclass=sa.NullPool)
    try:
        with engine.begin() as connection:
            assert dialect.ensure_installed(connection, quoted(engine), upgrade) is True
        with engine.connect() as connection:
            assert dialect.installed_version(connection, quoted(engine)) == upgrade.version
            assert connection.execute(sa.text(f"SELECT count(*) FROM {table(backend, 'upgrade_probe')}")).scalar() == 0
    finally:
        engine.dispose()


PRE_RELEASE = {"postgresql": "0.12", "sqlite": "0.8", "mysql": "0.8"}
REMOVAL = {
    "postgresql": (
        "`DROP EXTENSION fencemigrate CASCADE` if it was loaded with CREATE EXTENSION, then "
        "`DROP SCHEMA fencemigrate CASCADE`"
    ),
    "sqlite": (
        "`DROP TRIGGER` the version table's guard triggers `<version_table>_no_tokenless_insert`, `_update` "
        "and `_delete`, then `DROP TABLE` each `fencemigrate_*` table"
    ),
}
REMOVAL["mysql"] = REMOVAL["sqlite"]


def test_a_pre_release_fence_schema_is_refused_and_left_alone(
    backend: str, backend_url: str, make_project: MakeProject
) -> None:
    """A fence schema at a pre-release version (0.x, what fencemigrate installed before 1.0): a fenced
    run and ``install`` stop with exit 1, say how to reinstall it and change nothing; ``state`` reads it."""
    project = make_project(url=backend_url)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    run_in_process(project.path, "upgrade", "head", "--token", "5", "--holder", "agent-A").check(0)
    project.add_revision("a2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    old = PRE_RELEASE[backend]
    engine = sa.create_engine(backend_url, poolclass=sa.NullPool)
    try:
        with engine.begin() as connection:
            if backend == "postgresql":
                connection.exec_driver_sql(
                    "CREATE OR REPLACE FUNCTION fencemigrate.schema_version() RETURNS text "
                    f"LANGUAGE sql IMMUTABLE AS $$ SELECT '{old}'::text $$"
                )
            else:
                connection.execute(sa.text(f"UPDATE fencemigrate_schema_version SET version = '{old}'"))
        with engine.connect() as connection:
            before = fence_rows(backend, connection)

        message = (
            f"fencemigrate: error: fence schema fencemigrate is at version {old}, from a pre-release of "
            f"fencemigrate: this fencemigrate installs {dialect_for(backend).schema_version()} and does not "
            "upgrade pre-release fence schemas. Stop every writer, remove the fence schema "
            f"({REMOVAL[backend]}) and run `fencemigrate install`, which adopts what the version table has "
            "applied (docs/adopting.md, A pre-release fence schema). Nothing was changed"
        )
        for args in (("upgrade", "head", "--token", "6", "--holder", "agent-A"), ("install",)):
            result = run_in_process(project.path, *args)
            assert (result.code, result.stderr.splitlines()[-1]) == (1, message), result
        assert '"fence_schema_version": "' + old + '"' in run_in_process(project.path, "state", "--json").stdout
        with engine.connect() as connection:
            assert fence_rows(backend, connection) == before
            assert "t2" not in sa.inspect(connection).get_table_names()
    finally:
        engine.dispose()


def test_every_database_installs_the_same_fence_schema_version() -> None:
    """PostgreSQL's control file and the SQLite and MySQL scripts' constant name one version."""
    assert len({dialect_for(name).schema_version() for name in ("postgresql", "sqlite", "mysql")}) == 1

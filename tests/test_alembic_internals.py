"""What ``fencemigrate/alembic_internals.py`` relies on in Alembic and SQLAlchemy, checked for real.

Each failure names the Alembic and SQLAlchemy releases installed and the private name whose
behaviour changed: update the function in ``alembic_internals.py`` (and its docstring) for that
release, or pin below it. Everything runs on real SQLite files.
"""

from __future__ import annotations

import inspect
import io
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import alembic
import pytest
import sqlalchemy
from alembic import context as alembic_context
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script import base as script_base
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, create_engine, event, text

from fencemigrate.alembic_internals import (
    BlockFactory,
    alembic_wording,
    around_autocommit_blocks,
    around_env_py_calls,
    create_version_table,
    downgrade_steps,
    engines_dispatch_events,
    in_autocommit_isolation,
    listed_dependencies,
    mark_current,
    migration_function,
    parent_revisions,
    per_migration_transaction,
    relative_revision,
    replace_migration_function,
    revisions_below,
    rewrite_offline_output,
    script_by_id,
    set_engines_dispatch_events,
    stamp_steps,
    upgrade_steps,
    version_directories,
)
from fencemigrate.runtime import revisions


def require(holds: bool, name: str, expected: str) -> None:
    """Fail naming the releases and the private name when ``holds`` is false."""
    assert holds, (
        f"Alembic {alembic.__version__} / SQLAlchemy {sqlalchemy.__version__}: {name} no longer "
        f"{expected}; fencemigrate/alembic_internals.py relies on it"
    )


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'internals.db'}")
    yield engine
    engine.dispose()


@pytest.fixture
def connection(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as connection:
        yield connection


def has_table(engine: Engine, name: str) -> bool:
    with engine.connect() as connection:
        return sqlalchemy.inspect(connection).has_table(name)


def test_migration_function_is_what_run_migrations_calls(connection: Connection) -> None:
    name = "MigrationContext._migrations_fn"

    def given(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        return []

    planned: list[tuple[tuple[str, ...], MigrationContext]] = []

    def replacement(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        planned.append((heads, context))
        return []

    context = MigrationContext.configure(connection, opts={"fn": given})
    require(hasattr(context, "_migrations_fn"), name, "exists")
    require(migration_function(context) is given, name, "holds the fn the command passed in opts")
    replace_migration_function(context, replacement)
    context.run_migrations()
    require(planned == [((), context)], name, "is what run_migrations() calls with the heads")


def test_per_migration_transaction_opens_the_steps_transaction(engine: Engine, connection: Connection) -> None:
    name = "MigrationContext.begin_transaction(_per_migration=True)"
    require(
        "_per_migration" in inspect.signature(MigrationContext.begin_transaction).parameters,
        name,
        "takes _per_migration",
    )
    for transactional_ddl in (True, False):  # PostgreSQL and SQLite as fencemigrate runs it; MySQL
        opts = {"transaction_per_migration": True, "transactional_ddl": transactional_ddl}
        context = MigrationContext.configure(connection, opts=opts)
        with context.begin_transaction():  # env.py's outer one: nothing, per migration
            table = f"made_{transactional_ddl}".lower()
            with per_migration_transaction(context):
                require(connection.in_transaction(), name, f"opens a transaction ({opts})")
                connection.execute(text(f"CREATE TABLE {table} (x integer)"))
            require(not connection.in_transaction(), name, f"ends its transaction ({opts})")
        require(has_table(engine, table), name, f"commits its transaction ({opts})")


def test_env_py_calls_go_through_the_instance(tmp_path: Path, connection: Connection) -> None:
    name = "alembic.context's proxy of EnvironmentContext.configure/run_migrations"
    calls: list[str] = []

    def fn(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        calls.append("fn")
        return []

    def configure(original: Any, *args: Any, **kw: Any) -> None:
        calls.append("configure")
        original(*args, **kw)

    def run_migrations(original: Any, **kw: Any) -> None:
        calls.append("run_migrations")
        original(**kw)

    environment = EnvironmentContext(Config(str(tmp_path / "alembic.ini")), None, fn=fn)
    around_env_py_calls(environment, configure, run_migrations)
    with environment:  # what env.py sees as `from alembic import context`
        alembic_context.configure(connection=connection)
        require(alembic_context.get_context().connection is connection, name, "configures the context")
        with alembic_context.begin_transaction():
            alembic_context.run_migrations()
    require(calls == ["configure", "run_migrations", "fn"], name, f"looks methods up on the instance (calls: {calls})")


def test_autocommit_blocks_go_through_the_wrapper(connection: Connection) -> None:
    name = "MigrationContext.autocommit_block"
    entered: list[bool] = []

    @contextmanager
    def block(original: BlockFactory) -> Iterator[None]:
        with original():
            entered.append(in_autocommit_isolation(context.connection))  # type: ignore[arg-type]
            yield

    context = MigrationContext.configure(connection, opts={"transactional_ddl": True})
    around_autocommit_blocks(context, block)
    with context.begin_transaction():
        with Operations.context(context) as op:  # as a revision reaches it: op.get_context()
            autocommit = op.get_context().autocommit_block()
            require(isinstance(autocommit, AbstractContextManager), name, "returns a context manager")
            with autocommit:
                pass
    require(entered == [True], name, "is what op.get_context().autocommit_block() calls, in AUTOCOMMIT")


def test_offline_output_goes_through_static_output() -> None:
    name = "DefaultImpl.static_output"
    buffer = io.StringIO()
    context = MigrationContext.configure(dialect_name="sqlite", opts={"as_sql": True, "output_buffer": buffer})
    restore = rewrite_offline_output(context, str.upper)
    context.execute("select 1")
    restore()
    context.execute("select 2")
    require(
        "SELECT 1;" in buffer.getvalue() and "select 2;" in buffer.getvalue(),
        name,
        f"writes every --sql statement (wrote {buffer.getvalue()!r})",
    )


def test_autocommit_isolation_is_sqlalchemys_setting(tmp_path: Path, engine: Engine, connection: Connection) -> None:
    name = "Connection._is_autocommit_isolation()"
    require(callable(getattr(connection, "_is_autocommit_isolation", None)), name, "exists")
    require(not in_autocommit_isolation(connection), name, "is false on a plain connection")
    autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
    require(in_autocommit_isolation(autocommit), name, "is true with execution_options(AUTOCOMMIT)")
    autocommit.execution_options(isolation_level="SERIALIZABLE")
    require(not in_autocommit_isolation(autocommit), name, "is false once the level is set back")
    autocommit_engine = create_engine(f"sqlite:///{tmp_path / 'autocommit.db'}", isolation_level="AUTOCOMMIT")
    try:
        with autocommit_engine.connect() as on_engine:
            require(in_autocommit_isolation(on_engine), name, "is true with create_engine(isolation_level=AUTOCOMMIT)")
    finally:
        autocommit_engine.dispose()


def test_engine_class_listeners_set_the_dispatch_flag() -> None:
    name = "Engine._has_events"
    require(isinstance(Engine.__dict__.get("_has_events"), bool), name, "is a bool on the Engine class")
    before = engines_dispatch_events()

    def on_begin(connection: Connection) -> None:
        pass

    event.listen(Engine, "begin", on_begin)
    try:
        require(engines_dispatch_events(), name, "is set by listening on the Engine class")
    finally:
        event.remove(Engine, "begin", on_begin)
        set_engines_dispatch_events(before)
    require(engines_dispatch_events() is before, name, "can be put back")


def test_create_version_table_creates_it_empty_once(engine: Engine, connection: Connection) -> None:
    name = "MigrationContext._ensure_version_table()"
    context = MigrationContext.configure(connection, opts={"version_table": "versions_here"})
    require(callable(getattr(context, "_ensure_version_table", None)), name, "exists")
    with connection.begin():
        create_version_table(context)
        create_version_table(context)  # checkfirst: a second call changes nothing
    require(has_table(engine, "versions_here"), name, "creates the configured version table")
    require(context.get_current_heads() == (), name, "creates it empty")


_REVISIONS = {
    "a": "down_revision = None",
    "b": 'down_revision = "a"',
    "x": 'down_revision = None\nbranch_labels = ("other",)',
    "c": 'down_revision = "b"\ndepends_on = "other"',
}


@pytest.fixture
def script(tmp_path: Path) -> ScriptDirectory:
    """A script directory: a -> b -> c on one branch, x (labelled ``other``) on another, c depends on it."""
    versions = tmp_path / "scripts" / "versions"
    versions.mkdir(parents=True)
    for revision, lines in _REVISIONS.items():
        source = f'revision = "{revision}"\n{lines}\n\ndef upgrade():\n    pass\n\ndef downgrade():\n    pass\n'
        (versions / f"{revision}_rev.py").write_text(source, encoding="utf-8")
    (versions / "__init__.py").write_text("", encoding="utf-8")
    (versions / ".#a_rev.py").write_text("an editor's lock file", encoding="utf-8")
    return ScriptDirectory(str(tmp_path / "scripts"))


def _revisions(steps: list[Any]) -> list[tuple[str, bool]]:
    return [(step.revision.revision, step.is_upgrade) for step in steps]


def test_planners_are_alembics_commands(script: ScriptDirectory) -> None:
    for private in ("_upgrade_revs", "_downgrade_revs", "_stamp_revs"):
        require(callable(getattr(script, private, None)), f"ScriptDirectory.{private}", "exists")
    up = _revisions(upgrade_steps(script, "b", ()))
    require(up == [("a", True), ("b", True)], "ScriptDirectory._upgrade_revs", f"plans base -> b as a, b ({up})")
    up_from_str = _revisions(upgrade_steps(script, "b", "a"))
    require(
        up_from_str == [("b", True)], "ScriptDirectory._upgrade_revs", f"takes one head as a string ({up_from_str})"
    )
    down = _revisions(downgrade_steps(script, "a", ("b",)))
    require(down == [("b", False)], "ScriptDirectory._downgrade_revs", f"plans b -> a as b down ({down})")
    stamp = stamp_steps(script, ("b",), ())
    stamped = [(tuple(step.from_revisions), tuple(step.to_revisions)) for step in stamp]
    require(stamped == [((), ("b",))], "ScriptDirectory._stamp_revs", f"stamps b from base ({stamped})")


def test_relative_revisions_walk_the_graph(script: ScriptDirectory) -> None:
    name = "RevisionMap._walk"
    require(callable(getattr(script.revision_map, "_walk", None)), name, "exists")
    above = relative_revision(script, "a", 1, None)
    require(getattr(above, "revision", None) == "b", name, f"walks a+1 to b ({above})")
    below = relative_revision(script, "b", -1, None)
    require(getattr(below, "revision", None) == "a", name, f"walks b-1 to a ({below})")
    require(relative_revision(script, "a", 5, None) is None, name, "answers None past the end of the graph")


def test_revision_errors_in_alembics_words(script: ScriptDirectory) -> None:
    name = "ScriptDirectory._catch_revision_errors"
    require(callable(getattr(script, "_catch_revision_errors", None)), name, "exists")
    for walk, words in (
        (lambda: script.revision_map.get_revisions("nosuch"), "Can't locate revision identified by 'nosuch'"),
        (lambda: relative_revision(script, "nosuch", 1, None), "Can't locate revision identified by 'nosuch'"),
        (
            lambda: script.revision_map.get_revisions("head"),
            "Multiple head revisions are present for given argument 'head'",
        ),
    ):
        try:
            with alembic_wording(script):
                walk()
        except CommandError as error:
            require(str(error).startswith(words), name, f"words the error {words!r} ({error})")
        else:
            require(False, name, f"raises CommandError {words!r}")


def test_resolved_down_revisions_and_dependencies(script: ScriptDirectory) -> None:
    c = script.get_revision("c")
    assert c is not None
    parents = parent_revisions(c)
    require(
        parents == ("b", "x"),
        "Revision._normalized_down_revisions",
        f"lists down revisions and dependencies ({parents})",
    )
    below = revisions_below(c)
    require(below == ("b", "x"), "Revision._all_down_revisions", f"lists down revisions and dependencies ({below})")
    dependencies = listed_dependencies(c)
    require(dependencies == ("x",), "Revision._resolved_dependencies", f"resolves branch labels ({dependencies})")


def test_history_marks_current(script: ScriptDirectory) -> None:
    name = "Script._db_current_indicator"
    c = script.get_revision("c")
    assert c is not None
    mark_current(c, True)
    require("(current)" in c.cmd_format(verbose=False), name, "makes cmd_format() say (current)")
    mark_current(c, False)
    require("(current)" not in c.cmd_format(verbose=False), name, "is read by cmd_format() each time")


def test_scripts_by_exact_id_or_label(script: ScriptDirectory) -> None:
    name = "RevisionMap._revision_map"
    found = script_by_id(script, "c")
    require(found is not None and found.revision == "c", name, "maps revision ids to their scripts")
    labelled = script_by_id(script, "other")
    require(labelled is not None and labelled.revision == "x", name, "maps branch labels to their scripts")
    require(script_by_id(script, "zz") is None, name, "has no entry for an unknown id")


def test_version_directories_and_revision_files(tmp_path: Path, script: ScriptDirectory) -> None:
    name = "ScriptDirectory._version_locations"
    directories = version_directories(script)
    require(directories == [tmp_path / "scripts" / "versions"], name, f"lists the resolved directories ({directories})")
    pattern = getattr(script_base, "_only_source_rev_file", None)
    require(
        pattern is not None and pattern.pattern == revisions._REVISION_FILE.pattern,
        "alembic.script.base._only_source_rev_file",
        "is the rule fencemigrate/runtime/revisions.py copies",
    )

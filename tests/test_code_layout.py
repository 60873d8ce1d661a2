"""Where things may live in the package: each test lists every module that breaks its rule.

* Engines and connections are opened only in ``fencemigrate/connections.py``.
* Alembic's and SQLAlchemy's private names, and the methods fencemigrate replaces on their
  objects, are used only in ``fencemigrate/alembic_internals.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "fencemigrate"

OPENS = {"create_engine", "create_async_engine", "engine_from_config", "async_engine_from_config"}
"""Functions that create an engine, called by any name."""
OPENING_METHODS = {"connect", "raw_connection"}
"""Methods that open a connection (an engine's, or a driver's: ``psycopg.connect``, ``sqlite3.connect``...)."""

PRIVATE_NAMES = {
    "_migrations_fn",
    "_ensure_version_table",
    "_has_version_table",
    "_upgrade_revs",
    "_downgrade_revs",
    "_stamp_revs",
    "_walk",
    "_revision_map",
    "_version_locations",
    "_normalized_down_revisions",
    "_all_down_revisions",
    "_versioned_down_revisions",
    "_resolved_dependencies",
    "_db_current_indicator",
    "_has_events",
    "_is_autocommit_isolation",
}
"""Attributes of Alembic's and SQLAlchemy's objects that are not their public API."""
PRIVATE_KEYWORDS = {"_per_migration"}
REPLACED_METHODS = {"configure", "run_migrations", "autocommit_block", "static_output"}
"""Methods of Alembic's objects that fencemigrate replaces on an instance."""


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_data" in path.relative_to(PACKAGE).parts:  # env.py templates: the project's own code
            continue
        name = path.relative_to(PACKAGE.parent).as_posix()
        yield name, ast.parse(path.read_text(encoding="utf-8"), filename=name)


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def connection_openings(tree: ast.Module) -> list[str]:
    """``line: name`` of each call that creates an engine or opens a connection."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node)
        if name in OPENS or (isinstance(node.func, ast.Attribute) and name in OPENING_METHODS):
            found.append(f"{node.lineno}: {name}()")
    return sorted(found, key=lambda where: int(where.split(":")[0]))


def private_uses(tree: ast.Module) -> list[str]:
    """``line: what`` of each use of a private name, or replacement of a method on an instance."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.keyword) and node.arg in PRIVATE_KEYWORDS:
            found.append(f"{node.value.lineno}: {node.arg}=")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in REPLACED_METHODS:
                    found.append(f"{node.lineno}: .{target.attr} = ...")
    return sorted(found, key=lambda where: int(where.split(":")[0]))


def _offenders(check: object, allowed: str) -> list[str]:
    assert callable(check)
    return [f"{name}:{where}" for name, tree in _modules() if name != allowed for where in check(tree)]


def test_only_connections_module_opens_connections() -> None:
    offenders = _offenders(connection_openings, "fencemigrate/connections.py")
    assert not offenders, (
        "engines and connections are opened only in fencemigrate/connections.py (add a named function "
        "there and call it): " + "; ".join(offenders)
    )


def test_only_alembic_internals_uses_private_names() -> None:
    offenders = _offenders(private_uses, "fencemigrate/alembic_internals.py")
    assert not offenders, (
        "Alembic's and SQLAlchemy's private names and replaced methods are used only in "
        "fencemigrate/alembic_internals.py (a named function there, covered by "
        "tests/test_alembic_internals.py): " + "; ".join(offenders)
    )


def test_the_checks_see_what_they_look_for() -> None:
    """Each rule fires on what it forbids and not on its near misses."""
    opening = ast.parse(
        "e = create_engine(url)\nc = e.connect()\nr = e.raw_connection()\nd = sqlite3.connect(':memory:')\n"
    )
    assert connection_openings(opening) == [
        "1: create_engine()",
        "2: connect()",
        "3: raw_connection()",
        "4: connect()",
    ]
    near_opening = ast.parse("self._connect()\nevent.listen(Pool, 'connect', f)\nconnect = 1\nconnect()\n")
    assert connection_openings(near_opening) == []

    private = ast.parse(
        "f = ctx._migrations_fn\nctx.begin_transaction(_per_migration=True)\nEngine._has_events = x\n"
        "c._is_autocommit_isolation()\nctx.autocommit_block = g\nimpl.static_output = w\ncontext.configure = h\n"
    )
    assert private_uses(private) == [
        "1: ._migrations_fn",
        "2: _per_migration=",
        "3: ._has_events",
        "4: ._is_autocommit_isolation",
        "5: .autocommit_block = ...",
        "6: .static_output = ...",
        "7: .configure = ...",
    ]
    near_private = ast.parse(
        "ctx.begin_transaction()\nwith ctx.autocommit_block(): pass\nimpl.static_output('x')\n"
        "context.configure(connection=c)\nself._has_events_here = 1\n"
    )
    assert private_uses(near_private) == []


MAX_MODULES = 83
"""Modules in the package (issue 26: at most 90). A ratchet: lower it as modules merge, never raise it."""
MAX_ROOT_MODULES = 11
"""Modules at the package's root: the API, the CLI's entry, errors and the few shared below them."""
MAX_SQL_FILES = 9
"""Files under ``sql/`` (issue 26: at most 40). A ratchet, as :data:`MAX_MODULES`."""


def test_the_package_keeps_its_shape() -> None:
    """Fewer, larger modules whose names are the concepts: the counts only go down."""
    modules = sorted(PACKAGE.rglob("*.py"))
    root = [path.name for path in modules if path.parent == PACKAGE]
    sql_files = [path for path in (PACKAGE.parent / "sql").rglob("*") if path.is_file()]
    assert len(modules) <= MAX_MODULES, f"{len(modules)} modules: merge one into the module of its concept"
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the root ({', '.join(root)}): move one down"
    assert len(sql_files) <= MAX_SQL_FILES, f"{len(sql_files)} files under sql/"

"""The dialect registry (``fencemigrate.dialects``), and the layout rule it exists for: no branch on a
dialect name anywhere else in the package."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine

import fencemigrate
from fencemigrate import UsageError
from fencemigrate import dialects as dialects_package
from fencemigrate.dialects import Dialect, dialect_for
from fencemigrate.dialects import base as dialect_base
from fencemigrate.dialects.base import GrantLocks
from fencemigrate.dialects.fence_calls import FenceCalls
from fencemigrate.dialects.mysql import MysqlDialect
from fencemigrate.dialects.postgresql import PostgresqlDialect
from fencemigrate.dialects.sqlite import SqliteDialect

PACKAGE = Path(fencemigrate.__file__).parent
DIALECT_BRANCH = re.compile(r"dialect ==|dialect !=|dialect in \(|dialect\.name ==|dialect\.name !=|query_dialect\(")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("postgresql", PostgresqlDialect),
        ("sqlite", SqliteDialect),
        ("mysql", MysqlDialect),
        ("mariadb", MysqlDialect),
    ],
)
def test_finds_each_dialect_by_name(name: str, expected: type[Dialect]) -> None:
    found = dialect_for(name)
    assert type(found) is expected
    assert found is dialect_for(name)  # one instance per dialect


def test_mariadb_is_mysql() -> None:
    assert dialect_for("mariadb") is dialect_for("mysql")
    assert dialect_for("mariadb").name == "mysql"  # the file of sql/queries/ it uses


def test_an_unknown_dialect_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as raised:
        dialect_for("oracle")
    assert str(raised.value) == (
        "fencemigrate does not support the 'oracle' database: it fences mariadb, mysql, postgresql, sqlite"
    )


def test_every_dialect_module_is_named_once_for_each_of_its_names() -> None:
    """``dialect_for`` imports a dialect's module by its name: the map names each class's module
    under the class's own name and each alias, and nothing else."""
    names = {
        name: f"fencemigrate.dialects.{module}"
        for cls in (PostgresqlDialect, SqliteDialect, MysqlDialect)
        for name, module in ((n, cls.__module__.rsplit(".", 1)[1]) for n in (cls.__dialect__, *cls.aliases))
    }
    assert {name: f"fencemigrate.dialects.{module}" for name, module in dialect_base._MODULES.items()} == names


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'app.db'}"


@pytest.mark.parametrize(
    ("url_fixture", "expected", "sqlalchemy_name"),
    [
        ("pg_url", PostgresqlDialect, "postgresql"),
        ("sqlite_url", SqliteDialect, "sqlite"),
        ("mysql_url", MysqlDialect, "mysql"),
        ("mariadb_url", MysqlDialect, "mariadb"),
    ],
)
def test_finds_each_dialect_by_a_real_connection(
    url_fixture: str, expected: type[Dialect], sqlalchemy_name: str, request: pytest.FixtureRequest
) -> None:
    engine = create_engine(request.getfixturevalue(url_fixture))
    try:
        with engine.connect() as connection:
            assert connection.dialect.name == sqlalchemy_name
            assert connection.exec_driver_sql("SELECT 1").scalar() == 1
            assert type(dialect_for(connection)) is expected
            assert dialect_for(engine) is dialect_for(connection)
    finally:
        engine.dispose()


def test_no_dialect_branch_outside_the_dialects_package() -> None:
    """Dialect knowledge lives in ``fencemigrate/dialects/``: elsewhere code asks the dialect."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if PACKAGE / "dialects" not in path.parents
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if DIALECT_BRANCH.search(line)
    ]
    assert found == [], "dialect branches outside fencemigrate/dialects/:\n" + "\n".join(found)


#: What names a database: a comparison with one of these (or a driver name, ``postgresql+psycopg``,
#: or a name built on one, ``mysql_...``) outside ``fencemigrate/dialects/`` is a database-name branch.
DATABASE_NAMES = ("postgresql", "postgres", "sqlite", "mysql", "mariadb")
#: The modules that hold one database's code (or SQLite's and MySQL's shared code).
PER_DATABASE_MODULE = re.compile(
    r"fencemigrate\.dialects\.(?:(?:postgresql|sqlite|mysql|prefixed)(?:_\w+)?|\w+_schema)"
)

#: Where a database's name or module may appear outside ``fencemigrate/dialects/``: (file, the
#: literal or module) -> why it is not fencemigrate's own knowledge of a database.
ALLOWED = {
    ("fencemigrate/lint/code.py", "postgresql_concurrently"): (
        "the check rule reads the revision's own keyword argument (Alembic's `postgresql_concurrently=True`): "
        "a fact about the user's migration code, whatever database fencemigrate talks to"
    ),
    ("fencemigrate/connections.py", "postgres"): (
        "a bad URL's message names SQLAlchemy's dropped `postgres://` scheme: SQLAlchemy could not load "
        "the URL's dialect, so there is no dialect to ask"
    ),
    ("fencemigrate/runtime/environment.py", "fencemigrate.dialects.sqlite_transactions"): (
        "every env.py runs inside SQLite's transaction recipe, entered before env.py opens a connection (so "
        "before its database is known); the recipe is a module of its own so that runs on other databases "
        "never load SQLite's dialect"
    ),
}


def _dialect_classes() -> set[str]:
    """The names of the dialect classes, their grant locks and every kind of fence calls."""
    names: set[str] = set()
    for module in pkgutil.iter_modules(dialects_package.__path__, f"{dialects_package.__name__}."):
        for name, value in vars(importlib.import_module(module.name)).items():
            if isinstance(value, type) and value.__module__.startswith(dialects_package.__name__):
                if issubclass(value, (Dialect, FenceCalls, GrantLocks)) or name.endswith("Calls"):
                    names.add(name)
    return names


def _names_a_database(node: ast.expr) -> list[str]:
    """The literals in ``node`` (a string, or a tuple, list or set of them) that name a database."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [
        item.value
        for item in items
        if isinstance(item, ast.Constant)
        and isinstance(item.value, str)
        and any(item.value == name or item.value.startswith((f"{name}+", f"{name}_")) for name in DATABASE_NAMES)
    ]


def _imported(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The modules ``node`` (in the package's module ``module``) imports, absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".")[: -node.level]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
    return [source, *(f"{source}.{alias.name}" for alias in node.names)]


def database_knowledge(root: Path) -> list[tuple[str, int, str, str]]:
    """Every place in the package at ``root`` outside its ``dialects/`` that compares with a
    database's name (``==``, ``!=``, ``in``, ``startswith``), tests ``isinstance`` against a dialect
    or fence-calls class, or imports one database's module: (file, line, the name, what it does)."""
    classes = _dialect_classes()
    found: list[tuple[str, int, str, str]] = []
    for path in sorted(root.rglob("*.py")):
        if root / "dialects" in path.parents:
            continue
        file = f"fencemigrate/{path.relative_to(root).as_posix()}"
        module = ".".join(["fencemigrate", *path.relative_to(root).with_suffix("").parts])
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                for operand in (node.left, *node.comparators):
                    found += [(file, node.lineno, name, "compares") for name in _names_a_database(operand)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("startswith", "endswith", "removeprefix") and node.args:
                    found += [(file, node.lineno, name, node.func.attr) for name in _names_a_database(node.args[0])]
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
            ):
                if len(node.args) == 2:
                    kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                    for kind in kinds:
                        name = kind.id if isinstance(kind, ast.Name) else getattr(kind, "attr", None)
                        if name in classes:
                            found.append((file, node.lineno, name, node.func.id))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [
                    (file, node.lineno, name, "imports")
                    for name in _imported(node, module)
                    if PER_DATABASE_MODULE.fullmatch(name)
                ]
    return found


def test_no_database_knowledge_outside_the_dialects_package() -> None:
    """What fencemigrate knows of each database lives in ``fencemigrate/dialects/``: elsewhere code asks
    the dialect (a flag, a method, a hook of the fence calls) instead of naming the database."""
    found = [item for item in database_knowledge(PACKAGE) if (item[0], item[2]) not in ALLOWED]
    assert found == [], "database knowledge outside fencemigrate/dialects/:\n" + "\n".join(map(str, found))


def test_every_allowed_exception_is_still_there() -> None:
    """The allow-list names only what the package still has (with its reason)."""
    seen = {(file, name) for file, _, name, _ in database_knowledge(PACKAGE)}
    assert sorted(set(ALLOWED) - seen) == []
    assert all(reason for reason in ALLOWED.values())


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ('if engine.dialect.name == "sqlite":\n    pass\n', "compares"),
        ('if name in ("mysql", "mariadb"):\n    pass\n', "compares"),
        ('if url.drivername.startswith("postgresql"):\n    pass\n', "startswith"),
        ("if isinstance(calls, SqliteScriptCalls):\n    pass\n", "isinstance"),
        ("from ..dialects.sqlite_schema import VERSION\n", "imports"),
        ("from ..dialects import postgresql\n", "imports"),
        ("import fencemigrate.dialects.mysql\n", "imports"),
    ],
)
def test_the_scan_finds_each_kind(tmp_path: Path, source: str, what: str) -> None:
    """Control: each kind of database knowledge is found in a module outside the dialects."""
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "example.py").write_text(source, encoding="utf-8")
    assert {item[3] for item in database_knowledge(tmp_path)} == {what}

"""The dialect registry (``fencemigrate.dialects``), and the layout rule it exists for: no branch on a
dialect name anywhere else in the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine

import fencemigrate
from fencemigrate import UsageError
from fencemigrate.dialects import Dialect, dialect_for
from fencemigrate.dialects import base as dialect_base
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

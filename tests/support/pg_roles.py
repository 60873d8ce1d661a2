"""PostgreSQL roles for the one-role and two-role tests: the type of the ``make_role`` fixture
(tests/conftest.py), a role's URL, and the two-role setup (``install --grant-to``) with the migration
role's project."""

from __future__ import annotations

from collections.abc import Callable

from support.pg import PgServer
from support.project import MakeProject, Project

MakeRole = Callable[[], str]


def role_url(pg_server: PgServer, pg_dbname: str, role: str) -> str:
    """The test database as ``role`` sees it (the server trusts local connections)."""
    return f"postgresql+psycopg://{role}@{pg_server.host}:{pg_server.port}/{pg_dbname}"


def two_roles(
    make_project: MakeProject, make_role: MakeRole, pg_server: PgServer, pg_dbname: str
) -> tuple[Project, str]:
    """The owner installs the fence schema for the migration role: the migration role's project and URL."""
    owner, migrator = make_role(), make_role()
    owner_project = make_project(url=role_url(pg_server, pg_dbname, owner), name="owner")
    granted = owner_project.run_cli("install", "--grant-to", migrator).check(0)
    assert granted.stdout.splitlines() == [
        "installed",
        f"granted {migrator} what fencemigrate runs need in the fence schema fencemigrate, which it does not own, "
        "and the rows of the version table: it cannot switch the guard off",
    ]
    url = role_url(pg_server, pg_dbname, migrator)
    return make_project(url=url), url

"""PostgreSQL roles for the one-role and two-role tests: a factory of non-superuser login roles,
and the two-role setup (``install --grant-to``) with the migration role's project."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import pytest
from support.db import execute
from support.pg import PgServer
from support.project import MakeProject, Project

_ROLE_NUMBERS = itertools.count(1)

MakeRole = Callable[[], str]


@pytest.fixture
def make_role(pg_server: PgServer, pg_dbname: str, pg_url: str) -> Iterator[MakeRole]:
    """Factory of non-superuser login roles, unique per test, that may create schemas and tables in
    the test database; what they own there goes with them after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"fm_role_{os.getpid()}_{next(_ROLE_NUMBERS)}"
        execute(pg_url, f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB')
        execute(pg_url, f'GRANT CREATE, CONNECT ON DATABASE "{pg_dbname}" TO "{name}"')
        execute(pg_url, f'GRANT ALL ON SCHEMA public TO "{name}"')
        made.append(name)
        return name

    yield make
    for name in made:
        execute(pg_url, f'DROP OWNED BY "{name}" CASCADE')
        execute(pg_url, f'DROP ROLE "{name}"')


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

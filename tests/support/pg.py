"""Location of the PostgreSQL server the tests run against.

``.ci/test`` starts a throwaway server and exports ``FENCEMIGRATE_TEST_PG_HOST`` and
``FENCEMIGRATE_TEST_PG_PORT``. The server trusts the ``postgres`` user without a
password. There is deliberately no fallback (no default port, no skipping): a
missing or unreachable server is an error.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psycopg

HOST_VAR = "FENCEMIGRATE_TEST_PG_HOST"
PORT_VAR = "FENCEMIGRATE_TEST_PG_PORT"
USER = "postgres"
MAINTENANCE_DB = "postgres"


class PgServerUnavailable(RuntimeError):
    """The test PostgreSQL server is not configured or not reachable."""


@dataclass(frozen=True)
class PgServer:
    """Connection details of the test PostgreSQL server (no password: trust auth)."""

    host: str
    port: int
    user: str = USER

    def url(self, dbname: str, driver: str | None = "psycopg") -> str:
        """Return a SQLAlchemy URL for ``dbname``: ``postgresql+psycopg://postgres@host:port/db``.

        With ``driver=None`` the result is a plain libpq URL (``postgresql://...``).
        """
        scheme = "postgresql" if driver is None else f"postgresql+{driver}"
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{dbname}"


def server_from_env() -> PgServer:
    """Read the server location from the environment.

    Raises :class:`PgServerUnavailable` with an explanation when a variable is
    missing or malformed.
    """
    host = os.environ.get(HOST_VAR, "").strip()
    port_text = os.environ.get(PORT_VAR, "").strip()
    if not host or not port_text:
        raise PgServerUnavailable(
            f"{HOST_VAR} and {PORT_VAR} must point at a PostgreSQL server "
            f"(user {USER!r}, trust auth). Run the tests with `bash .ci/test [pytest args]`, "
            "which starts a throwaway server and sets them, or start one yourself with "
            '`eval "$(.ci/postgres start)"` and export '
            f"{HOST_VAR}=127.0.0.1 {PORT_VAR}=$PGPORT."
        )
    try:
        port = int(port_text)
    except ValueError:
        raise PgServerUnavailable(f"{PORT_VAR}={port_text!r} is not a port number") from None
    return PgServer(host=host, port=port)


def wait_until_reachable(server: PgServer, timeout: float = 15.0) -> None:
    """Connect to the maintenance database until it works or ``timeout`` seconds pass.

    Raises :class:`PgServerUnavailable` carrying the last connection error.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(
                host=server.host,
                port=server.port,
                user=server.user,
                dbname=MAINTENANCE_DB,
                connect_timeout=3,
            ) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as exc:
            if time.monotonic() >= deadline:
                raise PgServerUnavailable(
                    f"cannot connect to PostgreSQL at {server.host}:{server.port} as "
                    f"{server.user!r} (from {HOST_VAR}/{PORT_VAR}): {exc}".strip()
                ) from exc
            time.sleep(0.5)

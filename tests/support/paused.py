"""A real process stopped (SIGSTOP) in the middle of a transaction: a lease holder paused inside
its grant, renew or release, with the locks that transaction took still held by the database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

from .project import subprocess_env


@contextmanager
def paused_holder(script: str, timeout: float = 30.0) -> Iterator[str]:
    """Run the Python ``script`` in a subprocess until it prints its first line (what it wants the
    test to know, e.g. its backend pid, once its transaction holds its locks), then SIGSTOP it.

    Yields that line. On exit the process is resumed and killed: its connection closes and the
    database rolls its transaction back.
    """
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line:
            _, stderr = process.communicate(timeout=timeout)
            raise AssertionError(f"the holder exited before its transaction was open: {stderr}")
        os.kill(process.pid, signal.SIGSTOP)
        yield line
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.communicate(timeout=timeout)


def stopped_lease_call(url: str, call: str, session_id_sql: str) -> str:
    """A script for :func:`paused_holder`: fencemigrate's own lease service (``leases``) runs
    ``call`` (``leases.renew(...)``, ``leases.acquire(...)``) and stops inside its transaction at
    the first event it writes: the lease row changed (and, for a grant, the fence row claimed), not
    committed. Its first line is ``session_id_sql``'s answer on that transaction's connection
    (the backend pid, the connection id)."""
    return f"""
        import sys
        from sqlalchemy import create_engine, text
        from fencemigrate.leases.database import DatabaseLeases
        from fencemigrate.leases.model import LeaseRequest

        logged = DatabaseLeases._log

        def log_and_stop(self, connection, *args, **kwargs):
            logged(self, connection, *args, **kwargs)
            print(connection.execute(text({session_id_sql!r})).scalar(), flush=True)
            sys.stdin.read()

        DatabaseLeases._log = log_and_stop
        leases = DatabaseLeases(create_engine({url!r}), "fencemigrate")
        {call}
    """


def renewal_script(url: str, holder: str, session_id_sql: str) -> str:
    """:func:`stopped_lease_call` of ``holder``'s renewal (its current grant, for an hour)."""
    return stopped_lease_call(url, f'leases.renew("db/migrations", {holder!r}, None, 3600000)', session_id_sql)


def stopped_redis_grant(url: str, lease_url: str, holder: str, ttl_ms: int) -> str:
    """A script for :func:`paused_holder`: ``holder``'s grant by the Redis lease service stops
    inside its fence database transaction (grants of the resource locked, the fence claimed, not
    committed) at the first event it writes; its first line is that connection's backend pid."""
    return f"""
        import sys
        from sqlalchemy import create_engine, text
        from fencemigrate.leases.model import LeaseRequest
        from fencemigrate.leases.redis import RedisLeases

        logged = RedisLeases._log

        def log_and_stop(self, connection, *args, **kwargs):
            logged(self, connection, *args, **kwargs)
            print(connection.execute(text("SELECT pg_backend_pid()")).scalar(), flush=True)
            sys.stdin.read()

        RedisLeases._log = log_and_stop
        leases = RedisLeases({lease_url!r}, create_engine({url!r}), "fencemigrate")
        leases.acquire(LeaseRequest("db/migrations", {holder!r}, {ttl_ms}))
    """

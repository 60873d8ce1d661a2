"""Leases that issue fencing tokens: the built-in database service, or Redis."""

from __future__ import annotations

from urllib.parse import urlsplit

from sqlalchemy import Engine

from ..connections import unpooled_engine
from ..errors import UsageError
from ..scrub import remember_url_password, scrub_secrets
from .database import DatabaseLeases
from .fence_on_grant import check_preempt
from .model import DEFAULT_ACQUIRE_WAIT, DEFAULT_RUN_WAIT, DEFAULT_TTL, Grant, LeaseBackend, LeaseRequest, LeaseStatus
from .run_lease import HeldLease, RunnerLease

__all__ = [
    "DEFAULT_ACQUIRE_WAIT",
    "DEFAULT_RUN_WAIT",
    "DEFAULT_TTL",
    "Grant",
    "HeldLease",
    "LeaseBackend",
    "LeaseRequest",
    "LeaseStatus",
    "RunnerLease",
    "check_lease_url",
    "lease_engine",
    "open_backend",
]

_REDIS_SCHEMES = ("redis", "rediss", "unix")


def check_lease_url(url: str | None) -> str | None:
    """Reject a lease backend URL fencemigrate does not know, before anything is touched."""
    if url is None:
        return None
    remember_url_password(url)
    scheme = urlsplit(url).scheme
    if scheme not in _REDIS_SCHEMES:
        raise UsageError(
            f"unknown lease backend URL {scrub_secrets(url)!r}: use redis://HOST:PORT/DB "
            "(or leave it out for the built-in lease service in the migration database)"
        )
    return url


# Synchronous drivers for the async ones env.py may use: the lease service outlives env.py's
# event loop (a run releases its lease after env.py has returned).
_SYNC_DRIVERS = {
    "asyncpg": "psycopg",
    "psycopg_async": "psycopg",
    "psycopg": "psycopg",
    "aiosqlite": "pysqlite",
    "aiomysql": "pymysql",
    "asyncmy": "pymysql",
}


def lease_engine(engine: Engine) -> Engine:
    """The engine the lease service uses: env.py's own, or a synchronous one on the same URL when
    env.py's is async."""
    if not engine.dialect.is_async:
        return engine
    url = engine.url
    driver = _SYNC_DRIVERS.get(url.get_driver_name())
    if driver is None:
        raise UsageError(
            f"fencemigrate cannot take a lease through the async driver {url.drivername!r}: "
            "pass --token N from your own lease service"
        )
    return unpooled_engine(url.set(drivername=f"{url.get_backend_name()}+{driver}"))


def open_backend(
    engine: Engine, schema: str, lease_url: str | None, preempt: bool = False, wait_ms: int | None = None
) -> LeaseBackend:
    """The lease service for a run: Redis when ``lease_url`` names it, else the database's own.

    ``preempt``: the caller may grant with ``--preempt``; refused on SQLite before anything is touched.
    ``wait_ms``: the caller's ``--wait`` (a grant), which also bounds the wait for Redis to answer.
    """
    check_preempt(engine, preempt)
    if lease_url is None:
        return DatabaseLeases(engine, schema)
    from .redis import RedisLeases

    return RedisLeases(lease_url, engine, schema, wait_ms)

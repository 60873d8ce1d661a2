"""Leases that issue fencing tokens: the built-in database service, or Redis."""

from __future__ import annotations

from urllib.parse import urlsplit

from sqlalchemy import Engine

from ..errors import UsageError
from ..scrub import scrub_secrets
from .database import DatabaseLeases
from .fence_on_grant import check_preempt
from .model import Grant, LeaseBackend, LeaseRequest, LeaseStatus

__all__ = ["Grant", "LeaseBackend", "LeaseRequest", "LeaseStatus", "check_lease_url", "open_backend"]

_REDIS_SCHEMES = ("redis", "rediss", "unix")


def check_lease_url(url: str | None) -> str | None:
    """Reject a lease backend URL fencemigrate does not know, before anything is touched."""
    if url is None:
        return None
    scheme = urlsplit(url).scheme
    if scheme not in _REDIS_SCHEMES:
        raise UsageError(
            f"unknown lease backend URL {scrub_secrets(url)!r}: use redis://HOST:PORT/DB "
            "(or leave it out for the built-in lease service in the migration database)"
        )
    return url


def open_backend(engine: Engine, schema: str, lease_url: str | None, preempt: bool = False) -> LeaseBackend:
    """The lease service for a run: Redis when ``lease_url`` names it, else the database's own.

    ``preempt``: the caller may grant with ``--preempt``; refused on SQLite before anything is touched.
    """
    check_preempt(engine, preempt)
    if lease_url is None:
        return DatabaseLeases(engine, schema)
    from .redis_backend import RedisLeases

    return RedisLeases(lease_url, engine, schema)

"""The Redis half of the Redis lease backend: its keys and the Lua scripts that change them.

Three keys per resource, all judged by Redis's own clock:

* ``fencemigrate:lease:{resource}``: the lease, ``<token>:<holder>`` with a PX expiry (token
  ``0`` while a grant is being made);
* ``fencemigrate:token:{resource}``: the token counter (INCR), seeded from the database fence;
* ``fencemigrate:last:{resource}``: the last grant (a hash without expiry: holder, token, ttl_ms,
  granted_ms, expires_ms, state ``held``/``released``), so that an expiry is seen after the
  lease key is gone.

Every script runs atomically in Redis; the Lua sources live in ``lua/`` next to this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib.resources import files
from typing import Any

import redis

from ..config import format_duration
from ..errors import DatabaseError, UsageError
from ..scrub import scrub_secrets

_LUA = files("fencemigrate.leases") / "lua"
# How long a call waits for Redis (``?socket_timeout=`` in the URL wins): a grant what is left of
# ``--wait``, at least _LEAST_REPLY_MS; renew, release and status (no --wait) UNHURRIED_REPLY_MS.
# The scripts are short: no reply in that time means the server is paused, overloaded or gone.
UNHURRIED_REPLY_MS = 5000
_LEAST_REPLY_MS = 500


@cache
def _lua_source(name: str) -> str:
    """``lua/{name}.lua`` with the shared helpers of ``lua/common.lua`` in front."""
    common = (_LUA / "common.lua").read_text(encoding="utf-8")
    return common + "\n" + (_LUA / f"{name}.lua").read_text(encoding="utf-8")


def lease_key(resource: str) -> str:
    """The key holding ``<token>:<holder>`` with the lease's expiry."""
    return f"fencemigrate:lease:{resource}"


def token_key(resource: str) -> str:
    """The key holding the resource's token counter."""
    return f"fencemigrate:token:{resource}"


def last_key(resource: str) -> str:
    """The hash holding the resource's last grant."""
    return f"fencemigrate:last:{resource}"


def from_ms(milliseconds: int) -> datetime:
    """A Redis-clock time in milliseconds since the epoch, as an aware UTC datetime."""
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC)


@dataclass(frozen=True)
class LastGrant:
    """The last grant recorded for a resource (it outlives the lease key)."""

    holder: str
    token: int
    ttl_ms: int
    granted_ms: int
    expires_ms: int
    released: bool

    @staticmethod
    def parse(fields: list[Any]) -> LastGrant | None:
        """From the six fields the scripts return (None when no grant is recorded)."""
        holder, token, ttl_ms, granted_ms, expires_ms, state = fields
        if holder is None or token is None:
            return None
        return LastGrant(str(holder), int(token), int(ttl_ms), int(granted_ms), int(expires_ms), state == "released")

    def as_fields(self) -> list[str]:
        """Field/value pairs to store it back."""
        return [
            "holder",
            self.holder,
            "token",
            str(self.token),
            "ttl_ms",
            str(self.ttl_ms),
            "granted_ms",
            str(self.granted_ms),
            "expires_ms",
            str(self.expires_ms),
            "state",
            "released" if self.released else "held",
        ]


@dataclass(frozen=True)
class LeaseValue:
    """What the lease key holds: the holder and its token (0 while the grant is being made)."""

    holder: str
    token: int

    @staticmethod
    def parse(value: str) -> LeaseValue:
        """From ``<token>:<holder>``."""
        token, _, holder = value.partition(":")
        return LeaseValue(holder, int(token))

    def __str__(self) -> str:
        return f"{self.token}:{self.holder}"


@dataclass(frozen=True)
class Busy:
    """Another holder has the lease key now."""

    lease: LeaseValue
    expires_at: datetime


@dataclass(frozen=True)
class Issued:
    """A token issued to the holder of the lease key."""

    token: int
    seeded: bool  # the counter was behind the database fence (Redis lost it) and was raised to it
    granted_ms: int
    previous: LastGrant | None  # the last grant this one replaced


@dataclass(frozen=True)
class Peek:
    """The three keys of a resource, read at one instant of Redis's clock."""

    lease: LeaseValue | None
    pttl_ms: int
    counter: int
    now_ms: int
    last: LastGrant | None


class RedisLeaseStore:
    """The lease keys of every resource in one Redis database."""

    def __init__(self, url: str) -> None:
        self._given_url = url
        self._url = scrub_secrets(url)
        self._reply_ms = UNHURRIED_REPLY_MS
        self._client = self._connect()
        self._scripts = {
            name: self._client.register_script(_lua_source(name))
            for name in ("take", "issue", "give_back", "renew", "release", "peek")
        }

    def reply_within(self, milliseconds: int | None) -> None:
        """Bound each call from now on: ``milliseconds`` (what is left of ``--wait``, at least half
        a second), or :data:`UNHURRIED_REPLY_MS` when None. A new bound is a new connection."""
        wanted = UNHURRIED_REPLY_MS if milliseconds is None else max(milliseconds, _LEAST_REPLY_MS)
        if wanted != self._reply_ms:
            self._client.close()
            self._reply_ms = wanted
            self._client = self._connect()

    def ping(self) -> None:
        """DatabaseError unless the server answers."""
        try:
            self._client.ping()
        except redis.RedisError as error:
            raise self._failed(error) from None

    def run_id(self) -> str:
        """The Redis server's run id (``INFO server``): a new one at every restart and on the replica
        a failover promotes, so it tells when the last writes may have been lost."""
        try:
            return str(self._client.info("server")["run_id"])
        except redis.RedisError as error:
            raise self._failed(error) from None

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def _connect(self) -> redis.Redis:
        seconds = self._reply_ms / 1000
        try:
            return redis.Redis.from_url(
                self._given_url, decode_responses=True, socket_connect_timeout=seconds, socket_timeout=seconds
            )
        except ValueError as error:
            raise UsageError(f"invalid lease backend URL {self._url!r}: {error}") from None

    def take(self, resource: str, holder: str, ttl_ms: int) -> bool | Busy:
        """SET NX PX the lease key for a grant: True when taken, False when the holder already has
        it, Busy when another holder has it."""
        reply = self._run("take", [lease_key(resource)], [holder, ttl_ms])
        if reply[0] == "busy":
            return _busy(reply)
        return bool(reply[0] == "taken")

    def issue(self, resource: str, holder: str, floor: int | None, ttl_ms: int) -> Issued | Busy:
        """Issue ``max(counter, floor) + 1`` unless another holder has the lease key now (``floor``:
        the database fence's token, or the last token before a new epoch)."""
        reply = self._run(
            "issue",
            [lease_key(resource), token_key(resource), last_key(resource)],
            [holder, floor or 0, ttl_ms],
        )
        if reply[0] == "busy":
            return _busy(reply)
        return Issued(int(reply[1]), bool(reply[2]), int(reply[3]), LastGrant.parse(list(reply[4:10])))

    def give_back(self, resource: str, value: LeaseValue, issued: Issued | None) -> None:
        """Undo a grant whose database half failed (only what is still this grant's)."""
        previous = issued.previous.as_fields() if issued is not None and issued.previous else []
        self._run(
            "give_back",
            [lease_key(resource), last_key(resource)],
            [str(value), "" if issued is None else issued.token, *previous],
        )

    def renew(self, resource: str, holder: str, token: int | None, ttl_ms: int | None) -> tuple[int, bool, int] | None:
        """PEXPIRE the holder's lease by ``ttl_ms`` (None: its grant's TTL): (token, renewed after
        expiry, the TTL it was renewed by), or None when it is not theirs."""
        reply = self._run(
            "renew",
            [lease_key(resource), last_key(resource)],
            [holder, _wanted(token), "" if ttl_ms is None else ttl_ms],
        )
        return None if reply is None else (int(reply[0]), bool(reply[1]), int(reply[2]))

    def release(self, resource: str, holder: str, token: int | None) -> int | None:
        """DEL the holder's lease: the released token, or None when it is not theirs."""
        reply = self._run("release", [lease_key(resource), last_key(resource)], [holder, _wanted(token)])
        return None if reply is None else int(reply)

    def peek(self, resource: str) -> Peek:
        """The resource's keys as Redis sees them now."""
        reply = self._run("peek", [lease_key(resource), token_key(resource), last_key(resource)], [])
        value, pttl, counter, now = reply[:4]
        return Peek(
            lease=None if value is None else LeaseValue.parse(value),
            pttl_ms=int(pttl),
            counter=0 if counter is None else int(counter),
            now_ms=int(now),
            last=LastGrant.parse(list(reply[4:10])),
        )

    def _run(self, name: str, keys: list[str], args: list[str | int]) -> Any:
        try:
            return self._scripts[name](keys=keys, args=args, client=self._client)
        except redis.RedisError as error:
            raise self._failed(error) from None

    def _failed(self, error: redis.RedisError) -> DatabaseError:
        if isinstance(error, redis.TimeoutError):
            return DatabaseError(
                f"lease service {self._url} did not answer within {format_duration(self._reply_ms)} "
                "(paused, overloaded or unreachable); try again later"
            )
        return DatabaseError(f"lease service {self._url} failed: {scrub_secrets(str(error))}")


def _busy(reply: list[Any]) -> Busy:
    """From a script's ``{'busy', lease value, PTTL, Redis time in ms}``."""
    return Busy(LeaseValue.parse(reply[1]), from_ms(int(reply[3]) + max(int(reply[2]), 0)))


def _wanted(token: int | None) -> str:
    return "" if token is None else str(token)

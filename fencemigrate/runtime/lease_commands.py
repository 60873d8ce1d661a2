"""The lease commands, made through env.py's connection to the lease service (or Redis)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from alembic.config import Config
from alembic.runtime.migration import MigrationContext

from ..config import (
    check_holder,
    checked_resource,
    configured_lease_url,
    fence_schema,
    parse_token,
    parse_ttl_ms,
    parse_wait_ms,
)
from ..errors import Fenced, FencemigrateError, GrantUndone, LeaseLost, UsageError, newer_token_wrote
from ..fence.adoption import adopt_applied_history
from ..fence.guard import guard_first_write
from ..fence.state import State, read_state
from ..fence.tokens import with_newer_token_news
from ..leases import (
    DEFAULT_ACQUIRE_WAIT,
    DEFAULT_TTL,
    Grant,
    LeaseBackend,
    LeaseRequest,
    LeaseStatus,
    check_lease_url,
    open_backend,
)
from ..progress import SILENT
from .environment import run_without_steps
from .request import AcquireKeywords, ReleaseKeywords, RenewKeywords, reject_unknown

_T = TypeVar("_T")


def with_lease_backend(
    config: Config,
    lease_url: str | None,
    call: Callable[[LeaseBackend], _T],
    preempt: bool = False,
    after_grant: tuple[str, str] | None = None,
    wait_ms: int | None = None,
) -> tuple[_T, State | None]:
    """Open the lease service on env.py's database (or Redis), run ``call``, close it; with
    ``after_grant`` (``call`` granted a lease of this resource to this holder, which fenced the
    database), create and guard Alembic's version table (:func:`guard_first_write`), adopt what it
    applied before fencing (:func:`.fence.adoption.adopt_applied_history`) and read the state,
    through env.py's migration context.
    ``wait_ms``: a grant's ``--wait`` (see :func:`open_backend`).

    ``call`` runs as soon as env.py has connected, before env.py begins its transaction (as a
    run acquires its lease): on SQLite that transaction's ``BEGIN IMMEDIATE`` holds the
    database's only write lock, and the lease service's own connection could not write inside it.
    """
    url = check_lease_url(lease_url or configured_lease_url(config))
    schema = fence_schema(config)
    results: list[_T] = []
    states: list[State] = []

    def with_backend(context: MigrationContext) -> None:
        if results:
            return  # env.py configured a second connection: the lease service has answered already
        assert context.connection is not None
        backend = open_backend(context.connection.engine, schema, url, preempt, wait_ms)
        try:
            results.append(call(backend))
        finally:
            backend.close()

    def read(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        if after_grant is not None:
            quoted = context.dialect.identifier_preparer.quote(schema)
            guard_first_write(context, quoted)
            adopt_applied_history(context, quoted, *after_grant)
            states.append(read_state(context, schema))
        return []

    run_without_steps(config, read, on_connection=with_backend)
    if not results:
        raise FencemigrateError("env.py did not run the migration context; cannot reach the lease service")
    return results[0], (states[0] if states else None)


def call_lease_service(config: Config, lease_url: str | None, call: Callable[[LeaseBackend], _T]) -> _T:
    """What ``call`` answers (:func:`with_lease_backend` without a grant)."""
    return with_lease_backend(config, lease_url, call)[0]


def required_holder(holder: str | None) -> str:
    """``holder``, checked; the lease commands that name a holder require one."""
    if holder is None:
        raise UsageError("--holder NAME is required: the lease is granted to a named holder")
    return check_holder(holder)


def acquire(config: Config, keywords: AcquireKeywords) -> tuple[Grant, State]:
    """``lease acquire``: the grant, and the state read afresh after it."""
    reject_unknown(keywords, frozenset(AcquireKeywords.__annotations__))
    ttl, wait, preempt = keywords.get("ttl"), keywords.get("wait"), keywords.get("preempt", False)
    request = LeaseRequest(
        resource=checked_resource(config, keywords.get("resource")),
        holder=required_holder(keywords.get("holder")),
        ttl_ms=parse_ttl_ms(DEFAULT_TTL if ttl is None else ttl),
        wait_ms=parse_wait_ms(DEFAULT_ACQUIRE_WAIT if wait is None else wait),
        preempt=preempt,
    )
    progress = keywords.get("progress", SILENT)
    granted: list[Grant] = []

    def grant_now(backend: LeaseBackend) -> Grant:
        granted.append(backend.acquire(request, progress=progress))
        return granted[0]

    try:
        grant, fresh = with_lease_backend(
            config,
            keywords.get("lease_url"),
            grant_now,
            preempt=preempt,
            after_grant=(request.resource, request.holder),
            wait_ms=request.wait_ms,
        )
    except BaseException as failure:
        if not granted:
            raise
        undone = undo_grant(config, keywords.get("lease_url"), granted[0], failure)
        if not isinstance(failure, Exception):
            raise  # a stop signal stays what it is, the grant released first
        raise undone from failure
    assert fresh is not None
    return grant, fresh


def undo_grant(config: Config, lease_url: str | None, grant: Grant, failure: BaseException) -> GrantUndone:
    """``grant`` committed, then ``failure`` kept its caller from getting it (the state read after
    it, the caller's own work with it): release it, so that nobody holds a lease it was never told
    of, and say so. A release that fails too leaves it to expire (when, in the error)."""
    lease = grant.lease
    assert lease.holder is not None, "a grant names its holder"
    keywords: ReleaseKeywords = {
        "holder": lease.holder,
        "resource": lease.resource,
        "token": grant.token,
        "lease_url": lease_url,
    }
    live_until = None
    try:
        release(config, keywords)
    except LeaseLost:
        pass  # no longer this holder's: nothing is live in its name
    except FencemigrateError:
        live_until = lease.expires_at.isoformat() if lease.expires_at is not None else "the end of its TTL"
    return GrantUndone(lease.resource, lease.holder, grant.token, failure, live_until)


def renew(config: Config, keywords: RenewKeywords) -> Grant:
    """``lease renew``: the grant renewed."""
    reject_unknown(keywords, frozenset(RenewKeywords.__annotations__))
    name, who = checked_resource(config, keywords.get("resource")), required_holder(keywords.get("holder"))
    token, ttl = keywords.get("token"), keywords.get("ttl")
    grant_token = None if token is None else parse_token(token)
    ttl_ms = None if ttl is None else parse_ttl_ms(ttl)
    return call_lease_service(config, keywords.get("lease_url"), lambda b: b.renew(name, who, grant_token, ttl_ms))


def release(config: Config, keywords: ReleaseKeywords) -> LeaseStatus:
    """``lease release``: the lease's status once released."""
    reject_unknown(keywords, frozenset(ReleaseKeywords.__annotations__))
    name, who = checked_resource(config, keywords.get("resource")), required_holder(keywords.get("holder"))
    token = keywords.get("token")
    grant_token = None if token is None else parse_token(token)
    return call_lease_service(config, keywords.get("lease_url"), lambda b: b.release(name, who, grant_token))


def confirm(config: Config, grant: Grant) -> Grant:
    """``grant``, checked live before a write that no database fence guards (an MCP server's git
    push or file write), as a run's claim and renewals check it: :class:`Fenced` when the database
    fence has moved above its token (a newer grant, or a newer token's write), :class:`LeaseLost`
    when the lease service no longer holds it for its holder; otherwise renewed by its own TTL,
    so that no other grant can be issued while the write is made."""
    lease = grant.lease
    assert lease.holder is not None, "a grant names its holder"
    resource, holder, token = lease.resource, lease.holder, grant.token
    url = check_lease_url(configured_lease_url(config))
    schema = fence_schema(config)
    answers: list[Grant | Fenced] = []

    def with_backend(context: MigrationContext) -> None:
        if answers:
            return  # env.py configured a second connection: the lease service has answered already
        assert context.connection is not None
        backend = open_backend(context.connection.engine, schema, url)
        try:
            fence = backend.status(resource).fence_token
            if fence is not None and fence > token:
                answers.append(Fenced(resource, token, fence, newer_token_wrote(fence, resource)))
            else:
                answers.append(backend.renew(resource, holder, token, None))
        finally:
            backend.close()

    def news(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        if answers and isinstance(answers[0], Fenced):
            assert context.connection is not None
            quoted = context.dialect.identifier_preparer.quote(schema)
            answers[0] = with_newer_token_news(context.connection, quoted, answers[0])
        return []

    run_without_steps(config, news, on_connection=with_backend)
    if not answers:
        raise FencemigrateError("env.py did not run the migration context; cannot reach the lease service")
    if isinstance(answers[0], Fenced):
        raise answers[0]
    return answers[0]

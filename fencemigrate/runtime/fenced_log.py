"""FENCED, told and logged: after the rollback, whether the newer token has written, and the event."""

from __future__ import annotations

from sqlalchemy import Engine

from ..connections import separate_connection
from ..errors import Fenced
from ..fence.events import log_event
from ..fence.tokens import with_fence_token, with_newer_token_news
from .run_request import RunRequest


def told_and_logged(engine: Engine | None, request: RunRequest, fenced: Fenced) -> Fenced:
    """``fenced`` with the fence token (:func:`with_fence_token`), saying whether the newer token
    has written or was only granted (:func:`with_newer_token_news`), with its FENCED event
    appended, in their own transaction on ``engine`` (the last env.py connected; None: it never
    connected). Failing to read or log never changes the outcome."""
    if engine is None:
        return fenced
    settings = request.settings
    try:
        with separate_connection(engine) as connection, connection.begin():
            quoted_schema = connection.dialect.identifier_preparer.quote(settings.schema)
            fenced = with_fence_token(connection, quoted_schema, fenced)
            fenced = with_newer_token_news(connection, quoted_schema, fenced)
            log_event(
                connection,
                quoted_schema,
                resource=fenced.resource,
                kind="FENCED",
                holder=settings.holder,
                token=fenced.token or None,  # 0: refused before the run's own lease was granted
                revision=request.target,
                detail={
                    "command": request.command,
                    "fence_token": fenced.fence_token,
                    "reason": fenced.reason,
                    **({"autocommitted": list(fenced.autocommitted)} if fenced.autocommitted else {}),
                },
            )
    except Exception:  # noqa: BLE001 - failing to log must never change what the caller sees
        pass
    return fenced

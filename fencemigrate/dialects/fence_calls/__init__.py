"""The fence calls of a migration context: each dialect chooses its own (:meth:`Dialect.fence_calls`)."""

from __future__ import annotations

from .base import FenceCalls
from .plain import PlainStatementCalls, claim_fence
from .postgresql import PostgresFenceCalls
from .sqlite import SqliteFenceCalls
from .sqlite_script import SqliteScriptCalls

__all__ = [
    "FenceCalls",
    "PlainStatementCalls",
    "PostgresFenceCalls",
    "SqliteFenceCalls",
    "SqliteScriptCalls",
    "claim_fence",
]

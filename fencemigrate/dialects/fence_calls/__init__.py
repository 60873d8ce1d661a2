"""The fence calls of a migration context: each dialect chooses its own (:meth:`Dialect.fence_calls`)."""

from __future__ import annotations

from .base import FenceCalls
from .plain import PlainStatementCalls, claim_fence
from .postgresql import PostgresFenceCalls
from .sqlite import SqliteFenceCalls

__all__ = ["FenceCalls", "PlainStatementCalls", "PostgresFenceCalls", "SqliteFenceCalls", "claim_fence"]

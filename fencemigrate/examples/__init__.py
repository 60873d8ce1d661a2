"""Examples that run themselves: ``fencemigrate demo`` (:mod:`.incident`) replays the design notes'
incident, fenced and with plain Alembic, with zero setup."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..connections import translated_errors

if TYPE_CHECKING:
    from .incident import DemoResult


def demo(url: str | None, say: Callable[[str], None]) -> DemoResult:
    """Replay the design notes' incident fenced and with plain Alembic: on fresh SQLite files, or
    on scratch databases of the PostgreSQL server at ``url``."""
    from .incident import run_demo

    with translated_errors():
        return run_demo(url, say)

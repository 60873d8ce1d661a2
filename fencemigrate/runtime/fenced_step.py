"""A proxy for one Alembic migration step whose migration function runs under the fence."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fenced_run import FencedRun
    from .precheck_run import PrecheckRun
    from .precheck_script import PrecheckScript


class FencedStep:
    """Behaves as the wrapped ``RevisionStep``/``StampStep``; only ``migration_fn`` differs."""

    def __init__(self, step: Any, run: FencedRun | PrecheckRun | PrecheckScript) -> None:
        self._step = step
        original: Callable[..., None] = step.migration_fn

        @functools.wraps(original)
        def migration_fn(**kw: Any) -> None:
            run.execute_step(step, original, kw)

        self.migration_fn = migration_fn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._step, name)

    def __str__(self) -> str:
        return str(self._step)

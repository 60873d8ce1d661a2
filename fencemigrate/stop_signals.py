"""SIGTERM and SIGINT end a ``fencemigrate`` run the orderly way: roll back, release, exit 143 / 130.

Kubernetes stops a pod with SIGTERM; Python's default for it ends the process on the spot, and
the lease the run took stays held for its TTL. With :func:`stop_on_signals` (installed by the
console script) the first SIGTERM or SIGINT raises :class:`Stopped` in the main thread, wherever
it is: in env.py's migration (psycopg then cancels the statement running on the server, as it
does for Ctrl-C; on MySQL/MariaDB :func:`.connections.cancel_statement_on_server` does), or
waiting for the lease. The transaction rolls back as for any failure, the
lease is released, and the CLI exits ``128 + signal``. A second signal while that happens ends
the process at once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived. A KeyboardInterrupt, so that no ``except Exception`` on the way
    (env.py's, Alembic's, ours) mistakes it for an ordinary failure, and psycopg cancels the
    query in flight."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def signal_name(self) -> str:
        """``SIGTERM`` or ``SIGINT``."""
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by the signal: 143 for SIGTERM, 130 for SIGINT."""
        return 128 + self.signum


class _Deferral:
    """Whether a signal must wait for the end of a :func:`deferred` block, and which one came."""

    depth = 0
    pending: int | None = None


def stop_on_signals() -> None:
    """From now on, SIGTERM and SIGINT raise :class:`Stopped` in the main thread."""
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _stop)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold a stop signal back until the block ends (releasing the lease is not to be cut short)."""
    _Deferral.depth += 1
    try:
        yield
    finally:
        _Deferral.depth -= 1
    if _Deferral.depth == 0 and _Deferral.pending is not None:
        signum, _Deferral.pending = _Deferral.pending, None
        raise Stopped(signum)


def _stop(signum: int, frame: FrameType | None) -> None:
    for other in _STOP_SIGNALS:
        signal.signal(other, _exit_now)
    if _Deferral.depth:
        _Deferral.pending = signum
        return
    raise Stopped(signum)


def _exit_now(signum: int, frame: FrameType | None) -> None:
    os._exit(128 + signum)

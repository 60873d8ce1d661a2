"""How the ``fencemigrate`` process ends. SIGTERM and SIGINT end a ``fencemigrate`` run the orderly
way: roll back, release, exit 143 / 130.

Kubernetes stops a pod with SIGTERM; Python's default for it ends the process on the spot, and the
lease the run took stays held for its TTL. With :func:`stop_on_signals` (installed by the console
script) the first SIGTERM or SIGINT raises :class:`Stopped` in the main thread, wherever it is: in
env.py's migration (psycopg then cancels the statement running on the server, as it does for Ctrl-C;
on MySQL/MariaDB :meth:`.dialects.Dialect.cancel_statement` does), or waiting for the lease.
The transaction rolls back as for any failure, the lease is released, and the CLI exits ``128 +
signal``. A second signal while that happens ends the process at once.

The process ends without the interpreter's teardown (:func:`exit_process`). A process that has
imported Alembic, SQLAlchemy and psycopg and loaded a few hundred revision modules spends 0.1 to 0.2
s of CPU tearing them all down at exit, after its work is done: time a deploy, a CI job or an agent
waits for, and on a small machine where several runners start together, time the others wait for
too. The console script skips it. Everything an orderly exit does that anyone can observe still
happens first: the engines env.py connected through are disposed (the server sees each connection
closed, not dropped; an async engine is env.py's to dispose, as Alembic's async template does, since
its connections close only inside its event loop), ``atexit`` handlers run (logging's flush among
them, and env.py's own), and stdout and stderr are flushed. With another thread still running
(env.py's own), the process exits the ordinary way, which waits for it.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn
from weakref import WeakSet

from sqlalchemy import Engine

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


_engines: WeakSet[Engine] = WeakSet()


def close_at_exit(engine: Engine) -> None:
    """Dispose ``engine`` (closing its pooled connections) before the process exits."""
    _engines.add(engine)


def exit_process(status: int) -> NoReturn:
    """Exit with ``status``: the steps of an orderly exit that matter, then ``os._exit``."""
    if threading.active_count() > 1:
        sys.exit(status)
    for engine in list(_engines):
        if not engine.dialect.is_async:
            engine.dispose()
    atexit._run_exitfuncs()  # what the interpreter's own exit runs first
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(status)

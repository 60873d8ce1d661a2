"""Ending the ``fencemigrate`` process without the interpreter's teardown.

A process that has imported Alembic, SQLAlchemy and psycopg and loaded a few hundred revision
modules spends 0.1 to 0.2 s of CPU tearing them all down at exit, after its work is done: time
a deploy, a CI job or an agent waits for, and on a small machine where several runners start
together, time the others wait for too. The console script skips it. Everything an orderly exit
does that anyone can observe still happens first: the engines env.py connected through are
disposed (the server sees each connection closed, not dropped; an async engine is env.py's to
dispose, as Alembic's async template does, since its connections close only inside its event
loop), ``atexit`` handlers run (logging's flush among them, and env.py's own), and stdout and
stderr are flushed. With another thread still running (env.py's own), the process exits the
ordinary way, which waits for it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn
from weakref import WeakSet

from sqlalchemy import Engine

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

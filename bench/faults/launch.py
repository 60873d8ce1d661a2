"""``python -m faults.launch ARGS``: the ``fencemigrate`` CLI, with a stop point on a SQL statement.

``FAULTS_STOP_SQL=<regex>`` makes the process stop itself (``SIGSTOP``) right after the first
statement whose text matches, before anything else runs: inside a lease grant's transaction
(``lease\\s+SET holder``), for instance. (A migration's own claim does not go through an engine's
events: the revisions' own stop points, faults.project, cover it.)
With ``FAULTS_SQL_LOG=1`` as well, every statement is written to stderr (to find a point). The harness
resumes it. Nothing in fencemigrate is patched: the stop comes from a SQLAlchemy event listener on every engine.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine


def install_stop_point(pattern: str) -> None:
    """Stop the process once, right after the first statement matching ``pattern``."""
    compiled = re.compile(pattern, re.IGNORECASE)
    fired: list[str] = []

    @event.listens_for(Engine, "after_cursor_execute")
    def stop_after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if os.environ.get("FAULTS_SQL_LOG"):
            print(f"faults.launch: SQL {' '.join(statement.split())[:160]}", file=sys.stderr)
        if not fired and compiled.search(statement):
            fired.append(statement)
            os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    """Run fencemigrate's console script with ``sys.argv[1:]``."""
    pattern = os.environ.get("FAULTS_STOP_SQL")
    if pattern:
        install_stop_point(pattern)
    from fencemigrate.cli import run

    sys.argv = ["fencemigrate", *sys.argv[1:]]
    run()


if __name__ == "__main__":
    main()

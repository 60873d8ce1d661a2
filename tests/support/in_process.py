"""``fencemigrate`` run inside the test process with click's ``CliRunner``.

For tests of what a command prints (its text and its JSON): no interpreter to start, so such a
test costs a fraction of a subprocess run. Exit statuses, signals, the console script's own exit
and anything else about the process stay with the subprocess runs of :mod:`support.project`.

The command runs in the project directory, without writing bytecode (revision files are rewritten
in place, as in the subprocesses), and the logging configuration that the project's env.py
replaces (``fileConfig``) is put back afterwards.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import chdir, contextmanager
from pathlib import Path

from click.testing import CliRunner

from fencemigrate.cli import main
from support.project import Result


@contextmanager
def _logging_restored() -> Iterator[None]:
    """Put back every logger's level, handlers, ``disabled`` and ``propagate`` as they were."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    saved = {
        id(logger): (logger.level, list(logger.handlers), logger.disabled, logger.propagate)
        for logger in loggers
        if isinstance(logger, logging.Logger)
    }
    try:
        yield
    finally:
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
            if isinstance(logger, logging.Logger):
                level, handlers, disabled, propagate = saved.get(id(logger), (logging.NOTSET, [], False, True))
                logger.setLevel(level)
                logger.handlers[:] = handlers
                logger.disabled = disabled
                logger.propagate = propagate


def run_in_process(cwd: Path, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """Run ``fencemigrate *args`` in ``cwd`` inside this process; ``env`` entries override the
    environment (``None`` removes a variable) for the run."""
    dont_write_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        with chdir(cwd), _logging_restored():
            outcome = CliRunner().invoke(main, list(args), env=env, prog_name="fencemigrate", catch_exceptions=False)
    finally:
        sys.dont_write_bytecode = dont_write_bytecode
    return Result(("fencemigrate", *args), outcome.exit_code, outcome.stdout, outcome.stderr)

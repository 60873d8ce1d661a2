"""``fencemigrate`` run inside the test process: what :meth:`support.project.Project.run_cli` does
by default.

No interpreter to start, so a command costs a fraction of a subprocess run (about 20-130 ms against
1-1.5 s on a loaded CI machine). The command goes through what the console script runs
(:func:`fencemigrate.cli.run`) except the two things only a process has: the SIGTERM/SIGINT
handlers and the exit without the interpreter's teardown. So ``sys.exit("message")`` prints the
message (scrubbed) on stderr and exits 1, a stop signal raised inside exits 128 + signal, and an
uncaught exception prints its traceback on stderr and exits 1, as in the console script.

What a process would not share with the next command is put back after each run: the working
directory (the project's), environment overrides (``None`` removes a variable), stdin/stdout/stderr
(captured; stdout also as bytes), ``sys.path`` and the modules imported from the project directory
(``prepend_sys_path = .``), the logging configuration env.py replaces (``fileConfig``), the engines
env.py registered to be closed at exit (disposed, so no pooled connection outlives the command), the
passwords the scrubber learnt, the stop-signal handlers, warning filters and Alembic's terminal
width. Bytecode is not written (revision files are rewritten in place). A command still running
after ``timeout`` seconds ends the test process with every thread's traceback (faulthandler): a
lock wait that hangs fails the run instead of hanging CI.

Tests about the process itself (signals, ``os._exit``, atexit and thread joins, concurrency with
another command, a clock set wrong with faketime, plain ``alembic``) use
:meth:`support.project.Project.run_cli_process`. Only one command runs in the test process at a
time: the working directory, ``os.environ`` and the standard streams are process-wide.
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping
from contextlib import chdir, contextmanager
from pathlib import Path
from typing import Any

import alembic.config
import alembic.util.messaging
from click.testing import CliRunner

from fencemigrate import process, scrub
from fencemigrate.cli import _exit_status, main
from support.project import DEFAULT_TIMEOUT, Result


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


@contextmanager
def _imports_restored(project: Path) -> Iterator[None]:
    """Put back ``sys.path`` and forget what was imported from ``project`` (env.py's ``models``,
    found through ``prepend_sys_path = .``), so the next project imports its own."""
    path = list(sys.path)
    finders = set(sys.path_importer_cache)
    modules = set(sys.modules)
    root = project.resolve()
    try:
        yield
    finally:
        sys.path[:] = path
        for entry in set(sys.path_importer_cache) - finders:
            del sys.path_importer_cache[entry]
        for name in set(sys.modules) - modules:
            file = getattr(sys.modules[name], "__file__", None)
            if file is not None and Path(file).resolve().is_relative_to(root):
                del sys.modules[name]


@contextmanager
def _process_state_restored() -> Iterator[None]:
    """Dispose the engines env.py registered for the exit (as the console script's exit does) and put
    back the scrubber's passwords, the stop-signal handlers and the warning filters."""
    passwords = set(scrub._known_passwords)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        with warnings.catch_warnings():
            yield
    finally:
        for engine in list(process._engines):
            if not engine.dialect.is_async:
                engine.dispose()
        process._engines.clear()
        process._Deferral.depth, process._Deferral.pending = 0, None
        scrub._known_passwords.clear()
        scrub._known_passwords.update(passwords)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


class _CurrentStdout:
    """Alembic's ``Config(stdout=sys.stdout)`` default is the stdout of the time Alembic was
    imported: this stands for whatever ``sys.stdout`` is when Alembic prints."""

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stdout, name)


@contextmanager
def _alembic_output_captured() -> Iterator[None]:
    """Alembic prints to the captured stdout, unwrapped (stdin is not a terminal, as in a subprocess)."""
    init = alembic.config.Config.__init__
    defaults = init.__defaults__
    assert defaults is not None
    names = init.__code__.co_varnames[: init.__code__.co_argcount][-len(defaults) :]
    width = alembic.util.messaging.TERMWIDTH
    init.__defaults__ = tuple(
        _CurrentStdout() if name == "stdout" else value for name, value in zip(names, defaults, strict=True)
    )
    alembic.util.messaging.TERMWIDTH = None
    try:
        yield
    finally:
        init.__defaults__ = defaults
        alembic.util.messaging.TERMWIDTH = width


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """End the process with every thread's traceback if the block is still running after ``seconds``."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _console_script(args: list[str]) -> int:
    """:func:`fencemigrate.cli.run` without its signal handlers and process exit: the exit status."""
    try:
        main.main(args=args, prog_name="fencemigrate")
    except SystemExit as stop:
        return _exit_status(stop.code)
    except process.Stopped as stop:
        return stop.exit_status
    except Exception:
        sys.stderr.write(traceback.format_exc())  # what the interpreter prints for an uncaught exception
        return 1
    return 0


def run_in_process(
    cwd: Path,
    *args: str,
    env: Mapping[str, str | None] | None = None,
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Result:
    """Run ``fencemigrate *args`` in ``cwd`` inside this process; ``env`` entries override the
    environment (``None`` removes a variable) for the run, ``input`` is stdin (else empty)."""
    dont_write_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        with (
            CliRunner().isolation(input=input, env=env) as (stdout, stderr, _),
            chdir(cwd),
            _imports_restored(cwd),
            _logging_restored(),
            _process_state_restored(),
            _alembic_output_captured(),
            _time_limit(timeout),
        ):
            code = _console_script(list(args))
            sys.stdout.flush()
            sys.stderr.flush()
    finally:
        sys.dont_write_bytecode = dont_write_bytecode
    out = stdout.getvalue()
    return Result(("fencemigrate", *args), code, _text(out), _text(stderr.getvalue()), out)


def _text(data: bytes) -> str:
    """Decode as a text-mode subprocess pipe does (UTF-8, universal newlines)."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")

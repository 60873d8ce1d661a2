"""Failures of the project's own code, a revision's or env.py's: named with the file and line.

A revision that raises gives :class:`~fencemigrate.errors.RevisionFailed` (one for a database
error, which stays a :class:`~fencemigrate.errors.DatabaseError`), naming the revision and the
innermost line of its file on the traceback; env.py failing gives
:class:`~fencemigrate.errors.EnvPyFailed`. The original exception is the ``__cause__``
(``--raiseerr`` prints its traceback). FENCED and the other outcomes fencemigrate's own SQL raises
from inside a revision are left to :func:`..error_translation.translated_errors`; the monotonic guard's
is told which revision wrote.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from ..connections import is_driver_error
from ..errors import (
    CodeLocation,
    EnvPyFailed,
    FencemigrateError,
    MonotonicGuardRefused,
    RevisionDatabaseFailed,
    RevisionFailed,
    from_database_error,
    sqlstate_of,
)
from ..scrub import scrub_secrets


def describe(error: BaseException) -> str:
    """The error in one line: ``Type: message`` (a database error as fencemigrate words them)."""
    if is_database_error(error):
        original = getattr(error, "orig", None) or error
        lines = str(original).strip().splitlines()
        return "database error: " + scrub_secrets(lines[0] if lines else type(original).__name__)
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return scrub_secrets(text)


def is_database_error(error: BaseException) -> bool:
    """An error of SQLAlchemy or of the database driver."""
    return isinstance(error, SQLAlchemyError) or sqlstate_of(error) is not None or is_driver_error(error)


def locate(error: BaseException, path: str) -> CodeLocation | None:
    """The innermost frame of ``error``'s traceback in the file ``path``, if it passed there."""
    wanted = os.path.realpath(path)
    found: CodeLocation | None = None
    trace = error.__traceback__
    while trace is not None:
        code = trace.tb_frame.f_code
        if os.path.realpath(code.co_filename) == wanted:
            found = CodeLocation(shown_path(path), trace.tb_lineno, code.co_name)
        trace = trace.tb_next
    return found


def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it is under it, else absolute."""
    absolute = Path(path).resolve()
    try:
        return str(absolute.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(absolute)


@contextmanager
def revision_code(revision: str, path: str, aftermath: Callable[[], str], resource: str, token: int) -> Iterator[None]:
    """Run a revision's own code: what it raises becomes :class:`RevisionFailed` (``aftermath()``
    says what happened to the run's writes), except fencemigrate's own outcomes (FENCED, ...)."""
    try:
        yield
    except FencemigrateError:
        raise
    except Exception as error:
        if not is_database_error(error):
            raise RevisionFailed(revision, locate(error, path), describe(error), aftermath()) from error
        if (guarded := guard_refusal(error, revision, path, resource, token, aftermath)) is not None:
            raise guarded from error
        if from_database_error(error, resource, token) is not None:
            raise  # FENCED and the other refusals of fencemigrate's SQL, translated as ever
        raise RevisionDatabaseFailed(revision, locate(error, path), describe(error), aftermath()) from error


def guard_refusal(
    error: Exception, revision: str, path: str, resource: str, token: int, aftermath: Callable[[], str]
) -> MonotonicGuardRefused | None:
    """The monotonic guard's refusal of a write revision ``revision`` made (naming the revision and
    its line, then ``aftermath()``); None for any other error."""
    refused = from_database_error(error, resource, token) if is_database_error(error) else None
    if not isinstance(refused, MonotonicGuardRefused):
        return None
    writer = f"revision {revision}" + (f" ({where})" if (where := locate(error, path)) else "")
    return refused.written_by(writer, aftermath())


@contextmanager
def env_py_code(path: str) -> Iterator[None]:
    """Run env.py: what it raises itself becomes :class:`EnvPyFailed`; fencemigrate's outcomes,
    database and Alembic errors pass on unchanged (to :func:`..error_translation.translated_errors`)."""
    from alembic.util import CommandError

    try:
        yield
    except FencemigrateError:
        raise
    except Exception as error:
        if is_database_error(error) or isinstance(error, CommandError) or not _raised_by(error, path):
            raise
        raise EnvPyFailed(locate(error, path), describe(error)) from error


def _raised_by(error: BaseException, path: str) -> bool:
    """The file ``path`` is on ``error``'s traceback, and what it called last there is not Alembic
    (whose own errors, raised while env.py runs the migrations, are not env.py's)."""
    import alembic

    wanted, alembic_dir = os.path.realpath(path), os.path.dirname(os.path.realpath(alembic.__file__))
    called: str | None = None
    trace = error.__traceback__
    seen = False
    while trace is not None:
        filename = os.path.realpath(trace.tb_frame.f_code.co_filename)
        if filename == wanted:
            seen, called = True, None
        elif seen and called is None:
            called = filename
        trace = trace.tb_next
    return seen and (called is None or not called.startswith(alembic_dir + os.sep))

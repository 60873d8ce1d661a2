"""Failures of the project's own code, a revision's or env.py's: named with the file and line.

A revision that raises gives :class:`RevisionFailed` (one for a database error, which stays a
:class:`DatabaseError`), naming the revision and the innermost line of its file on the traceback;
env.py failing gives :class:`EnvPyFailed`. The original exception is the ``__cause__``
(``--raiseerr`` prints its traceback). FENCED and the other outcomes fencemigrate's own SQL raises
from inside a revision are left to :func:`.environment.translated_errors`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from ..connections import is_driver_error
from ..errors import DatabaseError, FencemigrateError, from_database_error, sqlstate_of
from ..scrub import scrub_secrets


@dataclass(frozen=True)
class CodeLocation:
    """Where in a file of the project an error passed last: its path as shown, line and function."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}, line {self.line}, in {self.function}"


class CodeFailed(FencemigrateError):
    """The project's own code raised: ``what`` (a revision, env.py) at ``location``, if it was found."""

    def __init__(
        self, what: str, location: CodeLocation | None, error: BaseException, aftermath: str, how: str = ""
    ) -> None:
        self.location = location
        self.cause = describe(error)
        where = f" ({location})" if location is not None else ""
        super().__init__(f"{what}{where} failed{how}: {self.cause}{aftermath}")

    def as_json(self) -> dict[str, Any]:
        return {
            **super().as_json(),
            "file": None if self.location is None else self.location.file,
            "line": None if self.location is None else self.location.line,
            "function": None if self.location is None else self.location.function,
            "error": self.cause,
        }


class RevisionFailed(CodeFailed):
    """A revision's ``upgrade()`` or ``downgrade()`` raised."""

    def __init__(self, revision: str, path: str, error: BaseException, aftermath: str, how: str = "") -> None:
        """``aftermath`` follows the error (what became of the run's writes); ``how`` follows "failed"."""
        self.revision = revision
        super().__init__(f"revision {revision}", locate(error, path), error, aftermath, how)

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "revision": self.revision}


class RevisionDatabaseFailed(RevisionFailed, DatabaseError):
    """A revision's statement failed in the database (still a database error: a grant with
    ``--preempt`` may have ended the run's session)."""


class EnvPyFailed(CodeFailed):
    """env.py itself raised (not a revision, not the database)."""

    def __init__(self, path: str, error: BaseException) -> None:
        super().__init__("env.py", locate(error, path), error, "")


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
            raise RevisionFailed(revision, path, error, aftermath()) from error
        if from_database_error(error, resource, token) is not None:
            raise  # FENCED and the other refusals of fencemigrate's SQL, translated as ever
        raise RevisionDatabaseFailed(revision, path, error, aftermath()) from error


@contextmanager
def env_py_code(path: str) -> Iterator[None]:
    """Run env.py: what it raises itself becomes :class:`EnvPyFailed`; fencemigrate's outcomes,
    database and Alembic errors pass on unchanged (to :func:`.environment.translated_errors`)."""
    from alembic.util import CommandError

    try:
        yield
    except FencemigrateError:
        raise
    except Exception as error:
        if is_database_error(error) or isinstance(error, CommandError) or not _raised_by(error, path):
            raise
        raise EnvPyFailed(path, error) from error


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

"""Confine a path an agent names to the project's directory, and open its directory without a race.

A path is relative, names a file, and has no ``..``. A symbolic link on the way is followed only if
it leads to a directory inside the project; the directory found is then opened one component at a
time with ``O_NOFOLLOW`` from the project's directory down, so a link swapped in meanwhile is
refused rather than followed. Missing directories are refused, never created. The file itself is
never a symbolic link: writing through one is refused (:func:`check_file`). Nothing in the git
repository's own ``.git`` directory can be named, however the path gets there.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import UsageError

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_GIT_DIRECTORY = ".git"
_PATH_MAX, _NAME_MAX = 4096, 255  # Linux's PATH_MAX and NAME_MAX, in bytes


@dataclass(frozen=True)
class ProjectFile:
    """A file of the project: ``shown`` is its path as the agent named it (normalised), ``directory``
    an open descriptor of the directory it is in, ``name`` its name there."""

    shown: str
    directory: int
    name: str


def project_path(path: str) -> PurePosixPath:
    """``path`` as a relative path inside the project; :class:`UsageError` for an absolute path,
    one with ``..``, or one that names no file."""
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise UsageError(f"bad path {path!r}: give a file's path relative to the project's directory")
    relative = PurePosixPath(path)
    if relative.is_absolute():
        raise UsageError(f"bad path {path!r}: an absolute path; give it relative to the project's directory")
    if ".." in relative.parts:
        raise UsageError(f"bad path {path!r}: '..' is not allowed; the path must stay inside the project's directory")
    if not relative.parts or path.endswith("/"):
        raise UsageError(f"bad path {path!r}: it names a directory, not a file")
    if len(path.encode()) > _PATH_MAX or any(len(part.encode()) > _NAME_MAX for part in relative.parts):
        raise UsageError(
            f"bad path {path[:80]!r}...: longer than a path ({_PATH_MAX} bytes) or a name ({_NAME_MAX}) can be"
        )
    _refuse_repository_files(relative.parts, path)
    return relative


def _refuse_repository_files(parts: tuple[str, ...], path: str) -> None:
    """:class:`UsageError` for a path in the git repository's own directory: its config and hooks run
    commands and its refs decide what ``push_branch`` pushes, so a write there would get around the
    fenced push (and run what the agent wrote)."""
    if any(part.casefold() == _GIT_DIRECTORY for part in parts):
        raise UsageError(
            f"bad path {path!r}: inside {_GIT_DIRECTORY}/, the repository's own files (its config and hooks run "
            "commands, its refs decide what push_branch pushes); only the project's files can be read or written"
        )


@contextmanager
def open_project_file(project_dir: Path, path: str) -> Iterator[ProjectFile]:
    """The file ``path`` of the project, its directory open while the context lasts."""
    relative = project_path(path)
    if not project_dir.is_dir():
        raise UsageError(f"the project's directory {project_dir} does not exist")
    root = project_dir.resolve(strict=True)
    resolved_parent = Path(os.path.realpath(root.joinpath(*relative.parts[:-1])))
    if resolved_parent != root and root not in resolved_parent.parents:
        raise UsageError(
            f"bad path {path!r}: a symbolic link on the way leads outside the project's directory "
            f"(to {resolved_parent})"
        )
    _refuse_repository_files(resolved_parent.relative_to(root).parts, path)
    directory = os.open(root, _DIRECTORY_FLAGS)
    try:
        for part in resolved_parent.relative_to(root).parts:
            below = _open_below(directory, part, relative)
            os.close(directory)
            directory = below
        yield ProjectFile(relative.as_posix(), directory, relative.name)
    finally:
        os.close(directory)


def check_file(file: ProjectFile) -> os.stat_result | None:
    """The file's status, None if it does not exist; :class:`UsageError` if it is a symbolic link
    or not a regular file."""
    try:
        status = os.stat(file.name, dir_fd=file.directory, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(status.st_mode):
        raise UsageError(f"bad path {file.shown!r}: a symbolic link; write to the file it points to, not through it")
    if not stat.S_ISREG(status.st_mode):
        raise UsageError(f"bad path {file.shown!r}: not a regular file")
    return status


def _open_below(directory: int, part: str, relative: PurePosixPath) -> int:
    """``part`` of ``directory`` opened as a directory; :class:`UsageError` if it is missing, not a
    directory or a symbolic link."""
    try:
        return os.open(part, _DIRECTORY_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        raise UsageError(
            f"bad path {relative.as_posix()!r}: directory {str(relative.parent)!r} does not exist "
            "(write_file creates no directories)"
        ) from None
    except OSError as error:
        if error.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        raise UsageError(
            f"bad path {relative.as_posix()!r}: {str(relative.parent)!r} is not a directory of the project "
            "(or was replaced by a symbolic link)"
        ) from None

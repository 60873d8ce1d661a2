"""A fenced write to a file of the project: compare the file's sha256 with the hash the agent read
it with, then replace it atomically, under a lock that every fenced write to its directory takes.

``expected_sha256`` is the file's hash as the agent read it (:func:`read_file` returns it), in hex,
or :data:`ABSENT` for a file that must not exist yet. The file is replaced as a whole: a temporary
file in the same directory, ``fsync``, ``os.replace``, the directory ``fsync``-ed; the file's
permission bits are kept (a new file gets the umask's). The lock is ``flock`` on the directory, so
no two fenced writes to that directory interleave their check and their replace. A writer that
does not go through :func:`write_file` takes no lock and checks no hash: nothing stops it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import Fenced, LeaseBusy, UsageError
from .project_paths import ProjectFile, check_file, open_project_file

ABSENT = "absent"
"""The ``expected_sha256`` that says the file must not exist yet."""
DEFAULT_LOCK_TIMEOUT = 10.0
"""Seconds a fenced write waits for another fenced write to the same directory."""

_SHA256 = re.compile(r"[0-9a-f]{64}")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOCK_POLL = 0.01


@dataclass(frozen=True)
class FileContent:
    """A project file's text and the sha256 (hex) of its bytes: the hash to write it back with."""

    text: str
    sha256: str


def read_file(project_dir: Path, path: str) -> FileContent:
    """The text of the project's file ``path`` (UTF-8) and its sha256; :class:`UsageError` if it
    does not exist, is outside the project or is not UTF-8 text."""
    with open_project_file(project_dir, path) as file:
        data = _read(file)
    if data is None:
        raise UsageError(f"no file {path!r} in the project's directory (write it with expected_sha256 {ABSENT!r})")
    try:
        return FileContent(data.decode("utf-8"), hashlib.sha256(data).hexdigest())
    except UnicodeDecodeError:
        raise UsageError(f"bad path {path!r}: not UTF-8 text") from None


def write_file(
    project_dir: Path,
    path: str,
    content: str,
    expected_sha256: str,
    token: int,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    confirm: Callable[[], object] | None = None,
) -> str:
    """Replace the project's file ``path`` with ``content`` (UTF-8) if it still has
    ``expected_sha256`` (or is absent, for :data:`ABSENT`); the sha256 of what was written.

    :class:`Fenced` (resource ``file:PATH``, ``token``) if the file changed, :class:`UsageError` for
    a path outside the project or a bad hash, :class:`LeaseBusy` if another fenced write to the
    directory holds its lock for ``lock_timeout`` seconds. ``confirm``: called under the lock once
    the arguments are checked, before the hash is compared (an MCP server's check that its grant
    is still the live one); what it raises is raised. Nothing is written unless it returns.
    """
    expected = _expected(expected_sha256)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UsageError(f"bad content for {path!r}: not encodable as UTF-8 ({error.reason})") from None
    with open_project_file(project_dir, path) as file:
        _lock(file, lock_timeout)
        check_file(file)
        if confirm is not None:
            confirm()
        current = _read(file)
        current_sha = ABSENT if current is None else hashlib.sha256(current).hexdigest()
        if current_sha != expected:
            raise _fenced(file, token, expected, current_sha)
        _replace(file, data)
    return hashlib.sha256(data).hexdigest()


def _expected(expected_sha256: str) -> str:
    value = expected_sha256.strip().lower() if isinstance(expected_sha256, str) else ""
    if value != ABSENT and not _SHA256.fullmatch(value):
        raise UsageError(
            f"bad expected_sha256 {expected_sha256!r}: give the sha256 of the file as you read it "
            f"(64 hex digits), or {ABSENT!r} for a file that must not exist yet"
        )
    return value


def _lock(file: ProjectFile, timeout: float) -> None:
    """Take the directory's lock (released when the directory is closed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(file.directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LeaseBusy(
                    f"file:{file.shown}",
                    None,
                    f"another fenced write to its directory held the lock for {timeout:g}s",
                ) from None
            time.sleep(_LOCK_POLL)


def _read(file: ProjectFile) -> bytes | None:
    """The file's bytes, None if it does not exist."""
    if check_file(file) is None:
        return None
    descriptor = os.open(file.name, _READ_FLAGS, dir_fd=file.directory)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise UsageError(f"bad path {file.shown!r}: not a regular file")
        return handle.read()


def _replace(file: ProjectFile, data: bytes) -> None:
    """Write ``data`` to a temporary file beside the file, then rename it over the file."""
    status = check_file(file)
    temporary = f".{file.name}.fencemigrate-{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(temporary, flags, 0o666 if status is None else 0o600, dir_fd=file.directory)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            if status is not None:
                os.fchmod(handle.fileno(), stat.S_IMODE(status.st_mode))
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, file.name, src_dir_fd=file.directory, dst_dir_fd=file.directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=file.directory)
        raise
    os.fsync(file.directory)


def _fenced(file: ProjectFile, token: int, expected: str, current: str) -> Fenced:
    """FENCED, never naming the hash on disk: the MCP server's read_file withholds it for a file it
    redacted (so that the redacted text can never replace it) or refuses (.env)."""
    found = (
        "is absent (no such file)" if current == ABSENT else "exists" if expected == ABSENT else "has another sha256"
    )
    return Fenced(
        f"file:{file.shown}",
        token,
        None,
        f"{file.shown} {found} on disk, not {_shown(expected)} as you read it; nothing was written",
        next_step=f"read {file.shown} again and re-plan from what it holds now.",
    )


def _shown(sha256: str) -> str:
    return "absent (no such file)" if sha256 == ABSENT else sha256

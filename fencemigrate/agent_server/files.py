"""The project's files as the MCP server reads and writes them: a path confined to the project's
directory, a fenced write, and what ``read_file`` never hands an agent.

**Paths.** A path an agent names is relative, names a file, and has no ``..``. A symbolic link on
the way is followed only if it leads to a directory inside the project; the directory found is then
opened one component at a time with ``O_NOFOLLOW`` from the project's directory down, so a link
swapped in meanwhile is refused rather than followed. Missing directories are refused, never
created. The file itself is never a symbolic link: writing through one is refused
(:func:`check_file`). Nothing in the git repository's own ``.git`` directory can be named, however
the path gets there.

**A fenced write** (:func:`write_file`) compares the file's sha256 with the hash the agent read it
with, then replaces it atomically, under a lock that every fenced write to its directory takes.
``expected_sha256`` is the file's hash as the agent read it (:func:`read_file` returns it), in hex,
or :data:`ABSENT` for a file that must not exist yet. The file is replaced as a whole: a temporary
file in the same directory, ``fsync``, ``os.replace``, the directory ``fsync``-ed; the file's
permission bits are kept (a new file gets the umask's). The lock is ``flock`` on the directory, so
no two fenced writes to that directory interleave their check and their replace. A writer that
does not go through :func:`write_file` takes no lock and checks no hash: nothing stops it.

**Secrets.** ``read_file`` never hands an agent a password the server knows or recognises, nor the
files that conventionally hold them. The server remembers the passwords of its own configuration:
the config file's URLs and password keys (as the CLI does), its environment's password variables
and URLs (when it starts), and the password of the engine env.py connects with (learnt by one read
through env.py before the first ``read_file``). A file's text is redacted of those wherever they
stand as words of their own, and of every URL password and password-like key's value
(:func:`..scrub.redact_file_text`). Files that conventionally hold secrets (``.env*``: ``.env``,
``.env.production``, ``.envrc``; ``.pgpass``, ``.my.cnf``, ``.netrc``, ``.git-credentials``,
``_netrc``; in any case) and the server's own config file when it holds a password are refused
unless the server runs with ``--read-secret-files``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import Fenced, LeaseBusy, UsageError
from ..scrub import remember_environment_passwords

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


# Compared ignoring case (a file system that ignores it opens .env for .ENV); _netrc is .netrc on Windows.
SECRET_FILE_NAMES = frozenset({".pgpass", ".my.cnf", ".netrc", "_netrc", ".git-credentials"})  # and every .env*
ALLOW = "start the server with --read-secret-files to read it with its secrets shown as ***"


def remember_server_passwords() -> None:
    """Remember the passwords in this process's environment (the config file's are remembered as it is read)."""
    remember_environment_passwords(os.environ)


def refuse_secret_name(path: str) -> None:
    """:class:`UsageError` when ``path`` names a conventionally secret file: nothing of it is read."""
    name = project_path(path).name
    if name.casefold() in SECRET_FILE_NAMES or name.casefold().startswith(".env"):
        raise UsageError(
            f"read_file refuses {path!r}: {name} conventionally holds secrets (read_file never reads .env*, "
            f"{', '.join(sorted(SECRET_FILE_NAMES))}); {ALLOW}"
        )


def refuse_config_file(project_dir: Path, path: str, config_file: str | None) -> None:
    """:class:`UsageError` when ``path`` is the server's own config file (called once it was found to
    hold a password)."""
    if config_file is None:
        return
    if os.path.realpath(project_dir / project_path(path)) == os.path.realpath(config_file):
        raise UsageError(f"read_file refuses {path!r}: the server's config file, and it holds credentials; {ALLOW}")

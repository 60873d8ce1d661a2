"""What ``read_file`` never hands an agent: a password the server knows or recognises, and the files
that conventionally hold them.

The server remembers the passwords of its own configuration: the config file's URLs and password
keys (as the CLI does), its environment's password variables and URLs (when it starts), and the
password of the engine env.py connects with (learnt by one read through env.py before the first
``read_file``). A file's text is redacted of those wherever they stand as words of their own, and
of every URL password and password-like key's value (:func:`..scrub.redact_file_text`). Files that
conventionally hold secrets (``.env*``: ``.env``, ``.env.production``, ``.envrc``; ``.pgpass``, ``.my.cnf``, ``.netrc``,
``.git-credentials``, ``_netrc``; in any case) and the server's own config file when it holds a password are refused
unless the server runs with ``--read-secret-files``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UsageError
from ..fenced_writes.project_paths import project_path
from ..scrub import remember_environment_passwords

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

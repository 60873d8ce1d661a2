"""Run git for a fenced push: bounded, non-interactive, in the project's repository, scrubbed.

Each command runs in a session of its own with no terminal and stdin from ``/dev/null``: no
credential or SSH prompt can wait for a person. No hook runs (``core.hooksPath=/dev/null``). At
its timeout the whole process group is killed (a ``git-remote-https`` or ``ssh`` child included).
The repository-local variables git itself clears when it changes repositories (``GIT_DIR``,
``GIT_WORK_TREE``, ...) are removed, so a caller's environment cannot point the command at
another repository.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import GitFailed
from ..scrub import scrub_secrets

GIT = "git"
DEFAULT_TIMEOUT = 60.0
"""Seconds a git command may run before it is killed."""

_REPOSITORY_VARIABLES = (  # `git rev-parse --local-env-vars`
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR",
)
_NO_PROMPTS = {
    "GIT_TERMINAL_PROMPT": "0",  # no username or password prompt on a terminal
    "GIT_ASKPASS": "",  # nor through an askpass program (an empty one stops git looking for SSH_ASKPASS)
    "SSH_ASKPASS_REQUIRE": "never",
    "GCM_INTERACTIVE": "never",  # Git Credential Manager
    "LC_ALL": "C",  # git's messages in English, as they are matched
}
# No credential prompt, and no hook: a hook is a file (core.hooksPath may put it among the project's
# files, where write_file reaches), so running one would run what an agent wrote, and let it push anything.
_CONFIG = ("-c", "credential.interactive=false", "-c", "core.hooksPath=/dev/null")


@dataclass(frozen=True)
class GitResult:
    """What a finished git command returned, its output already scrubbed of passwords."""

    returncode: int
    stdout: str
    stderr: str

    def message(self) -> str:
        """git's own account of a failure: its stderr (else stdout), in one paragraph."""
        text = (self.stderr.strip() or self.stdout.strip() or f"exit status {self.returncode}").splitlines()
        return " / ".join(line.strip() for line in text if line.strip())


def git_environment() -> dict[str, str]:
    """This process's environment without the repository-local variables, with prompts disabled."""
    environment = {name: value for name, value in os.environ.items() if name not in _REPOSITORY_VARIABLES}
    environment.update(_NO_PROMPTS)
    return environment


def run_git(repository: Path, args: list[str], what: str, timeout: float = DEFAULT_TIMEOUT) -> GitResult:
    """Run ``git -C repository ARGS``; :class:`GitFailed` naming ``what`` (``git push origin``) if it
    cannot start or runs longer than ``timeout`` seconds. A non-zero exit status is returned, not raised."""
    command = [GIT, "-C", str(repository), *_CONFIG, *args]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=git_environment(),
            start_new_session=True,
        )
    except OSError as error:
        raise GitFailed(scrub_secrets(what), f"git could not be started: {error.strerror or error}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # the group may have ended meanwhile
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise GitFailed(
            scrub_secrets(what), f"timed out after {timeout:g}s and was stopped (no prompt can be answered)"
        ) from None
    return GitResult(
        process.returncode,
        scrub_secrets(stdout.decode("utf-8", "replace")),
        scrub_secrets(stderr.decode("utf-8", "replace")),
    )

"""A fenced push of the migration branch: a fast-forward of the remote's branch as recorded at grant.

When the lease is granted, :func:`record_branch` reads the remote's ref (``git ls-remote``) and
keeps its SHA, or that the branch was absent, with the grant's token. :func:`push_branch` pushes
the project repository's own branch of the same name (``refs/heads/BRANCH``, resolved to its
commit once, so what is pushed is what is recorded) only if the remote's ref is still the recorded
SHA and that SHA is an ancestor of the commit pushed (``git merge-base --is-ancestor``, after
fetching the remote's commits when they are not in the repository): a push never removes a commit
from the remote's branch, not even one of the holder's own. The push itself goes with
``--force-with-lease=refs/heads/BRANCH:<recorded SHA>`` (an empty SHA for an absent branch: the ref
must not exist), so a ref that moves between the check and the push is caught too; never a plain
``--force``. It returns the record moved to the pushed commit. If the remote's ref is no longer
the recorded SHA (checked first, git's "stale info", or a ref that moved while the push was in
flight), or the commit pushed does not contain it, the push is :class:`Fenced` and the remote is
unchanged. The agent never supplies a SHA: a fenced writer can push again only under a new grant,
which records afresh. Rewinding a branch is a person's decision, made with git.

Git runs bounded, non-interactive, in the project's repository, scrubbed (:func:`run_git`): each
command runs in a session of its own with no terminal and stdin from ``/dev/null``, so no
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
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import Fenced, GitFailed, UsageError
from ..scrub import remember_url_password, scrub_secrets

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


_FAILED_TO_PUSH = "error: failed to push some refs to "


@dataclass(frozen=True)
class BranchRemote:
    """Where a fenced push goes from and to.

    ``repository``: a directory of the project's git repository (the project's own directory; git
    finds the repository from there); ``remote``: a remote's name or URL; ``timeout``: the seconds
    each git command may take.
    """

    repository: Path
    remote: str = "origin"
    timeout: float = DEFAULT_TIMEOUT


@dataclass(frozen=True)
class BranchRecord:
    """The remote's ``refs/heads/BRANCH`` as recorded for the lease with ``token``: its SHA, or None
    when the branch did not exist. Recorded at grant; moved only by a push of this holder's."""

    branch: str
    token: int
    sha: str | None

    @property
    def resource(self) -> str:
        """The name a FENCED push reports: ``git:BRANCH``."""
        return f"git:{self.branch}"


def record_branch(where: BranchRemote, branch: str, token: int) -> BranchRecord:
    """The grant-time record of ``branch`` on ``where.remote`` for the lease with ``token``."""
    _check(where, branch)
    return BranchRecord(branch, token, _remote_sha(where, branch))


def push_branch(where: BranchRemote, record: BranchRecord, confirm: Callable[[], object] | None = None) -> BranchRecord:
    """Push the local ``refs/heads/BRANCH`` to the remote only if the remote still has the recorded
    SHA and the local commit contains it (a fast-forward); the record moved to the pushed commit.
    :class:`Fenced` if the remote's branch moved or the push would remove commits from it,
    :class:`GitFailed` for any other failure, :class:`UsageError` for a bad name or no local branch.
    ``confirm``: called once the names are checked, before the remote is compared (an MCP server's
    check that its grant is still the live one); what it raises is raised, nothing pushed."""
    _check(where, record.branch)
    commit = _local_commit(where, record.branch)
    if confirm is not None:
        confirm()
    current = _remote_sha(where, record.branch)
    if current != record.sha:
        raise _fenced(where, record, current)
    if current is not None and not _contains(where, record, commit, current):
        raise _rewinds(where, record, commit, current)
    ref = f"refs/heads/{record.branch}"
    lease = f"--force-with-lease={ref}:{record.sha or ''}"
    result = _git(where, ["push", "--porcelain", lease, where.remote, f"{commit}:{ref}"], f"git push {where.remote}")
    if result.returncode == 0:
        return replace(record, sha=commit)
    try:
        current = _remote_sha(where, record.branch)
    except GitFailed as unread:
        raise GitFailed(
            scrub_secrets(f"git push {where.remote}"),
            f"{_push_failure(result)}; the remote's {ref} could not be read afterwards ({unread.reason})",
        ) from None
    if "(stale info)" in result.stdout or current != record.sha:
        raise _fenced(where, record, current)
    raise GitFailed(
        scrub_secrets(f"git push {where.remote}"),
        scrub_secrets(f"{_push_failure(result)}; the remote's {ref} is unchanged at {_shown(current)}"),
    )


def _check(where: BranchRemote, branch: str) -> None:
    """:class:`UsageError` unless ``branch`` is a valid branch name and neither name reads as an
    option; :class:`GitFailed` unless ``where.repository`` is in a git repository."""
    if not branch or branch.startswith("-"):
        raise UsageError(f"bad branch name {branch!r}: a branch name cannot be empty or start with '-'")
    if not where.remote or where.remote.startswith("-"):
        raise UsageError(scrub_secrets(f"bad remote {where.remote!r}: a remote cannot be empty or start with '-'"))
    remember_url_password(where.remote)
    result = _git(where, ["rev-parse", "--git-dir"], "git rev-parse")
    if result.returncode != 0:
        raise GitFailed("git rev-parse", f"{where.repository} is not in a git repository ({result.message()})")
    if _git(where, ["check-ref-format", f"refs/heads/{branch}"], "git check-ref-format").returncode != 0:
        raise UsageError(f"bad branch name {branch!r}: git does not accept refs/heads/{branch} as a ref")


def _local_commit(where: BranchRemote, branch: str) -> str:
    """The commit of the project repository's ``refs/heads/BRANCH``; :class:`UsageError` without one."""
    result = _git(where, ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}"], "git rev-parse")
    if result.returncode != 0:
        raise UsageError(
            f"no local branch {branch!r} in the project's repository ({where.repository}): "
            "push_branch pushes the local branch of that name; commit to it first"
        )
    return result.stdout.strip()


def _remote_sha(where: BranchRemote, branch: str) -> str | None:
    """The SHA of the remote's ``refs/heads/BRANCH`` now; None when it does not exist."""
    ref = f"refs/heads/{branch}"
    result = _git(where, ["ls-remote", where.remote, ref], f"git ls-remote {where.remote}")
    if result.returncode != 0:
        raise GitFailed(scrub_secrets(f"git ls-remote {where.remote}"), result.message())
    # ls-remote matches the pattern against the tail of each ref: keep the exact name only.
    shas = [line.split("\t")[0] for line in result.stdout.splitlines() if line.endswith(f"\t{ref}")]
    return shas[0] if shas else None


def _contains(where: BranchRemote, record: BranchRecord, commit: str, tip: str) -> bool:
    """Whether ``commit`` contains the remote's ``tip`` (``git merge-base --is-ancestor``), the
    remote's commits fetched first when the repository does not have ``tip`` (into no ref: the
    project's branches, remote-tracking refs and files stay as they are)."""
    if not _has_commit(where, tip):
        fetch = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--refmap=", where.remote]
        result = _git(where, [*fetch, f"refs/heads/{record.branch}"], f"git fetch {where.remote}")
        if result.returncode != 0:
            raise GitFailed(scrub_secrets(f"git fetch {where.remote}"), result.message())
        if not _has_commit(where, tip):  # the remote's branch moved again meanwhile
            raise _fenced(where, record, _remote_sha(where, record.branch))
    result = _git(where, ["merge-base", "--is-ancestor", tip, commit], "git merge-base")
    if result.returncode not in (0, 1):
        raise GitFailed("git merge-base", result.message())
    return result.returncode == 0


def _has_commit(where: BranchRemote, sha: str) -> bool:
    return _git(where, ["cat-file", "-e", f"{sha}^{{commit}}"], "git cat-file").returncode == 0


def _rewinds(where: BranchRemote, record: BranchRecord, commit: str, tip: str) -> Fenced:
    reason = (
        f"the remote has commits your branch does not have: remote {where.remote} has refs/heads/{record.branch} "
        f"at {tip}, which your {record.branch} ({commit}) does not contain; push_branch never removes commits from "
        "the remote's branch, nothing was pushed"
    )
    next_step = (
        f"fetch, re-read and re-plan: fetch {record.branch} from {where.remote}, read what it holds now and build "
        "on it under a new lease (rewinding a branch is a person's decision, made with git)."
    )
    return Fenced(record.resource, record.token, None, scrub_secrets(reason), next_step=scrub_secrets(next_step))


def _fenced(where: BranchRemote, record: BranchRecord, current: str | None) -> Fenced:
    reason = (
        f"remote {where.remote} has refs/heads/{record.branch} at {_shown(current)}, not at "
        f"{_shown(record.sha)} as recorded for your lease; nothing was pushed"
    )
    next_step = (
        f"fetch {record.branch} from {where.remote}, read what is there now and re-plan; "
        "a push needs a new lease, whose grant records the branch afresh."
    )
    return Fenced(record.resource, record.token, None, scrub_secrets(reason), next_step=scrub_secrets(next_step))


def _push_failure(result: GitResult) -> str:
    """Why git refused the push: its status line for the ref (``[remote rejected] (hook declined)``),
    then its errors."""
    statuses = [line.split("\t")[-1] for line in result.stdout.splitlines() if line.startswith("!\t")]
    errors = [
        line.strip()
        for line in result.stderr.splitlines()
        if line.strip() and not line.startswith(_FAILED_TO_PUSH) and not line.startswith("To ")
    ]
    return " / ".join([*statuses, *errors]) or result.message()


def _shown(sha: str | None) -> str:
    return sha if sha is not None else "absent (no such branch)"


def _git(where: BranchRemote, args: list[str], what: str) -> GitResult:
    return run_git(where.repository, args, scrub_secrets(what), where.timeout)

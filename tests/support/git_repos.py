"""Real git repositories for the fenced push tests: a bare remote and two clones in ``tmp_path``.

``agent`` is the project's repository (the one :mod:`fencemigrate.agent_server.git_push`
pushes from); ``other`` is another writer's clone of the same remote. git must be installed: a
missing git fails the tests, it never skips them.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

BRANCH = "feat/billing-schema"
GIT = shutil.which("git")


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` (asserting it succeeds); its stdout, stripped."""
    assert GIT is not None, "git is not installed: the fenced push tests need a real git"
    result = subprocess.run(
        [GIT, "-C", str(cwd), *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, f"git {' '.join(args)} failed in {cwd}:\n{result.stdout}{result.stderr}"
    return result.stdout.strip()


@dataclass(frozen=True)
class Repositories:
    """A bare ``remote`` and two clones of it, each with ``BRANCH`` checked out."""

    remote: Path
    agent: Path
    other: Path

    def commit(self, clone: Path, text: str) -> str:
        """Commit ``text`` as migrations/0042.sql on the clone's current branch; the commit's SHA."""
        (clone / "migrations").mkdir(exist_ok=True)
        (clone / "migrations" / "0042.sql").write_text(text)
        git(clone, "add", "migrations/0042.sql")
        git(clone, "commit", "-q", "-m", text)
        return git(clone, "rev-parse", "HEAD")

    def remote_sha(self, branch: str = BRANCH) -> str | None:
        """The remote's ``refs/heads/BRANCH`` read in the bare repository itself; None if absent."""
        shas = git(self.remote, "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}")
        return shas or None

    def remote_has(self, commit: str) -> bool:
        """Whether ``commit`` is reachable from any branch of the remote."""
        return bool(git(self.remote, "branch", "--contains", commit)) if self._exists(commit) else False

    def _exists(self, commit: str) -> bool:
        assert GIT is not None
        probe = [GIT, "-C", str(self.remote), "cat-file", "-e", f"{commit}^{{commit}}"]
        return subprocess.run(probe, capture_output=True, timeout=60).returncode == 0


def make_repositories(root: Path) -> Repositories:
    """The bare remote with ``BRANCH`` at one commit of the agent's, and both clones on it."""
    remote, agent, other = root / "remote.git", root / "agent", root / "other"
    git(root, "init", "-q", "--bare", str(remote))
    for clone in (agent, other):
        git(root, "clone", "-q", str(remote), str(clone))
        git(clone, "config", "user.name", clone.name)
        git(clone, "config", "user.email", f"{clone.name}@example.com")
    repositories = Repositories(remote, agent, other)
    git(agent, "checkout", "-q", "-b", BRANCH)
    repositories.commit(agent, "0042: the first version")
    git(agent, "push", "-q", "origin", BRANCH)
    git(other, "fetch", "-q", "origin")
    git(other, "checkout", "-q", "-b", BRANCH, f"origin/{BRANCH}")
    return repositories

"""Fenced pushes of the migration branch, against a real bare repository and two real clones.

The grant records the remote's SHA; a push goes only with ``--force-with-lease`` against it. A
push after another clone's is FENCED and leaves the remote with the other clone's commit; the
control, a plain ``git push --force`` from the same stale clone, loses that commit. Other
failures are their own errors, never FENCED; no message carries a remote URL's password.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from support.git_repos import BRANCH, GIT, Repositories, git, make_repositories

from fencemigrate.agent_server.git_push import BranchRecord, BranchRemote, push_branch, record_branch
from fencemigrate.errors import Fenced, GitFailed, UsageError

TOKEN = 33
SECRET_URL = "https://user:secret@127.0.0.1/repo.git"


def test_git_is_installed() -> None:
    """These tests run real git; without it they fail here (and everywhere below), never skip."""
    assert GIT is not None, "git is not installed"


@pytest.fixture
def repos(tmp_path: Path) -> Repositories:
    return make_repositories(tmp_path)


@pytest.fixture
def where(repos: Repositories) -> BranchRemote:
    return BranchRemote(repos.agent)


def fenced_text(recorded: str, current: str) -> str:
    return "\n".join(
        [
            f"FENCED: this write to git:{BRANCH} is not yours to make.",
            f"Rejected for token {TOKEN}: remote origin has refs/heads/{BRANCH} at {current}, not at {recorded} "
            "as recorded for your lease; nothing was pushed.",
            "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
            "Your plan and your memory of this resource are probably stale, including anything",
            "your context summary says you 'hold'.",
            f"Next step: fetch {BRANCH} from origin, read what is there now and re-plan; a push needs a new lease, "
            "whose grant records the branch afresh.",
            "If your goal is already met by the current state, report that and stop.",
        ]
    )


# -- the incident: another clone pushed after the grant ------------------------------------------


def test_the_grant_records_the_remote_sha(repos: Repositories, where: BranchRemote) -> None:
    record = record_branch(where, BRANCH, TOKEN)
    assert record == BranchRecord(BRANCH, TOKEN, repos.remote_sha())
    assert record.sha == git(repos.agent, "rev-parse", BRANCH)
    assert record.resource == f"git:{BRANCH}"


def test_a_push_after_another_clones_push_is_fenced_and_the_remote_keeps_it(
    repos: Repositories, where: BranchRemote
) -> None:
    record = record_branch(where, BRANCH, TOKEN)  # agent A's grant
    theirs = repos.commit(repos.other, "0042: B's version")
    git(repos.other, "push", "-q", "origin", BRANCH)  # B pushes after A's grant
    repos.commit(repos.agent, "0042: A's stale version")

    with pytest.raises(Fenced) as fenced:
        push_branch(where, record)

    assert str(fenced.value) == fenced_text(record.sha or "", theirs)
    assert (fenced.value.resource, fenced.value.token, fenced.value.fence_token) == (f"git:{BRANCH}", TOKEN, None)
    assert fenced.value.exit_status == 3
    assert repos.remote_sha() == theirs  # the remote is unchanged: B's commit is still there


def test_control_a_plain_force_push_from_the_stale_clone_loses_the_other_commit(repos: Repositories) -> None:
    """What the fence prevents: the same stale clone with ``git push --force`` overwrites B's push."""
    theirs = repos.commit(repos.other, "0042: B's version")
    git(repos.other, "push", "-q", "origin", BRANCH)
    mine = repos.commit(repos.agent, "0042: A's stale version")

    git(repos.agent, "push", "-q", "--force", "origin", BRANCH)

    assert repos.remote_sha() == mine
    assert not repos.remote_has(theirs)  # B's commit is gone from the remote's branches


def test_a_ref_moved_while_the_push_was_in_flight_is_fenced(repos: Repositories, where: BranchRemote) -> None:
    """The remote's ref moves after git push compared it (a pre-receive hook moves it): still FENCED."""
    record = record_branch(where, BRANCH, TOKEN)
    git(repos.other, "checkout", "-q", "-b", "elsewhere")
    theirs = repos.commit(repos.other, "0042: B's version, pushed mid-flight")
    git(repos.other, "push", "-q", "origin", "elsewhere")
    hook = repos.remote / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\nunset GIT_QUARANTINE_PATH\ngit update-ref refs/heads/{BRANCH} {theirs}\n")
    hook.chmod(0o755)
    repos.commit(repos.agent, "0042: A's version")

    with pytest.raises(Fenced) as fenced:
        push_branch(where, record)

    assert str(fenced.value) == fenced_text(record.sha or "", theirs)
    assert repos.remote_sha() == theirs


# -- pushes with nothing in between ---------------------------------------------------------------


def test_a_push_moves_the_record_and_the_next_push_builds_on_it(repos: Repositories, where: BranchRemote) -> None:
    record = record_branch(where, BRANCH, TOKEN)
    first = repos.commit(repos.agent, "0042: A's version")

    moved = push_branch(where, record)

    assert moved == BranchRecord(BRANCH, TOKEN, first)
    assert repos.remote_sha() == first
    second = repos.commit(repos.agent, "0043: A's next revision")
    assert push_branch(where, moved) == BranchRecord(BRANCH, TOKEN, second)
    assert repos.remote_sha() == second
    repos.commit(repos.agent, "0044: pushed with the grant's record, not the moved one")
    with pytest.raises(Fenced):  # the grant's record is stale now: only the moved one pushes
        push_branch(where, record)
    assert repos.remote_sha() == second


def test_a_rewritten_branch_is_fenced_even_over_the_holders_own_push(repos: Repositories, where: BranchRemote) -> None:
    """A push is a fast-forward or nothing: the holder's own pushed commit is not replaced either
    (rewinding a branch is a person's decision, made with git)."""
    record = push_branch(where, record_branch(where, BRANCH, TOKEN))
    git(repos.agent, "commit", "-q", "--amend", "-m", "0042: A's version, amended")
    amended = git(repos.agent, "rev-parse", "HEAD")
    assert amended != record.sha

    with pytest.raises(Fenced) as fenced:
        push_branch(where, record)

    assert fenced.value.reason == rewind_reason(record.sha or "", amended)
    assert repos.remote_sha() == record.sha


# -- a fresh grant never makes a rewind of the remote legitimate (issue 24, defect 2) ------------------


def rewind_reason(tip: str, mine: str) -> str:
    return (
        f"the remote has commits your branch does not have: remote origin has refs/heads/{BRANCH} at {tip}, which "
        f"your {BRANCH} ({mine}) does not contain; push_branch never removes commits from the remote's branch, "
        "nothing was pushed"
    )


def local_snapshot(clone: Path) -> tuple[str, str, str]:
    """The clone's refs, status and files: what a refused push must leave as it was."""
    files = "\n".join(
        f"{path.relative_to(clone)}:{path.read_bytes().hex()}"
        for path in sorted(clone.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(clone).parts
    )
    return git(clone, "for-each-ref"), git(clone, "status", "--porcelain"), files


@pytest.mark.parametrize("fetched", [False, True], ids=["B's commit unknown to A", "B's commit fetched, not merged"])
def test_a_push_under_a_fresh_grant_that_would_drop_another_holders_commit_is_fenced(
    repos: Repositories, where: BranchRemote, fetched: bool
) -> None:
    """B pushed under its grant; A, whose branch never got B's commit, is granted afresh (recording
    B's commit) and pushes: FENCED, the remote keeps B's commit, A's refs and files are as they were."""
    theirs = repos.commit(repos.other, "0042: B's version")
    git(repos.other, "push", "-q", "origin", BRANCH)
    mine = repos.commit(repos.agent, "0042: A's stale version")
    if fetched:
        git(repos.agent, "fetch", "-q", "origin")
    record = record_branch(where, BRANCH, TOKEN)  # A's fresh grant records B's commit
    assert record.sha == theirs
    before = local_snapshot(repos.agent)

    with pytest.raises(Fenced) as fenced:
        push_branch(where, record)

    assert str(fenced.value) == "\n".join(
        [
            f"FENCED: this write to git:{BRANCH} is not yours to make.",
            f"Rejected for token {TOKEN}: {rewind_reason(theirs, mine)}.",
            "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
            "Your plan and your memory of this resource are probably stale, including anything",
            "your context summary says you 'hold'.",
            f"Next step: fetch, re-read and re-plan: fetch {BRANCH} from origin, read what it holds now and build on "
            "it under a new lease (rewinding a branch is a person's decision, made with git).",
            "If your goal is already met by the current state, report that and stop.",
        ]
    )
    assert fenced.value.resource == f"git:{BRANCH}" and fenced.value.exit_status == 3
    assert repos.remote_sha() == theirs
    assert local_snapshot(repos.agent) == before


def test_control_force_with_lease_against_the_sha_at_grant_drops_the_other_holders_commit(
    repos: Repositories, where: BranchRemote
) -> None:
    """What push_branch did before: ``--force-with-lease`` against the SHA the fresh grant recorded
    passes, and B's commit is gone from the remote."""
    theirs = repos.commit(repos.other, "0042: B's version")
    git(repos.other, "push", "-q", "origin", BRANCH)
    mine = repos.commit(repos.agent, "0042: A's stale version")
    record = record_branch(where, BRANCH, TOKEN)

    git(repos.agent, "push", "-q", f"--force-with-lease=refs/heads/{BRANCH}:{record.sha}", "origin", BRANCH)

    assert repos.remote_sha() == mine
    assert not repos.remote_has(theirs)


def test_a_branch_rebased_on_the_remote_pushes_as_a_fast_forward(repos: Repositories, where: BranchRemote) -> None:
    theirs = repos.commit(repos.other, "0042: B's version")
    git(repos.other, "push", "-q", "origin", BRANCH)
    repos.commit(repos.agent, "0042: A's stale version")
    git(repos.agent, "fetch", "-q", "origin")
    git(repos.agent, "reset", "-q", "--hard", f"origin/{BRANCH}")
    mine = repos.commit(repos.agent, "0043: A's revision, on top of B's")
    record = record_branch(where, BRANCH, TOKEN)

    assert push_branch(where, record) == BranchRecord(BRANCH, TOKEN, mine)
    assert repos.remote_sha() == mine and repos.remote_has(theirs)


def test_a_branch_absent_at_grant_is_created(repos: Repositories, where: BranchRemote) -> None:
    git(repos.agent, "checkout", "-q", "-b", "feat/new")
    record = record_branch(where, "feat/new", TOKEN)
    assert record.sha is None
    mine = repos.commit(repos.agent, "0044: new branch")
    assert push_branch(where, record).sha == mine
    assert repos.remote_sha("feat/new") == mine


def test_a_branch_absent_at_grant_and_created_by_someone_else_is_fenced(
    repos: Repositories, where: BranchRemote
) -> None:
    git(repos.agent, "checkout", "-q", "-b", "feat/new")
    record = record_branch(where, "feat/new", TOKEN)
    git(repos.other, "checkout", "-q", "-b", "feat/new")
    theirs = repos.commit(repos.other, "0044: B's new branch")
    git(repos.other, "push", "-q", "origin", "feat/new")
    repos.commit(repos.agent, "0044: A's new branch")

    with pytest.raises(Fenced) as fenced:
        push_branch(where, record)

    assert fenced.value.reason == (
        f"remote origin has refs/heads/feat/new at {theirs}, not at absent (no such branch) as recorded for your "
        "lease; nothing was pushed"
    )
    assert repos.remote_sha("feat/new") == theirs


def test_the_pushed_commit_is_the_project_repositorys_own_branch(
    repos: Repositories, where: BranchRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local ref is the project repository's ``refs/heads/BRANCH``, not HEAD, and a ``GIT_DIR``
    in the caller's environment cannot point the push at another repository."""
    record = record_branch(where, BRANCH, TOKEN)
    mine = repos.commit(repos.agent, "0042: A's version")
    git(repos.agent, "checkout", "-q", "-b", "scratch")
    repos.commit(repos.agent, "scratch work, not for the branch")
    repos.commit(repos.other, "0042: B's local commit, never pushed")
    monkeypatch.setenv("GIT_DIR", str(repos.other / ".git"))

    assert push_branch(where, record).sha == mine
    monkeypatch.delenv("GIT_DIR")
    assert repos.remote_sha() == mine


# -- failures that are not FENCED -----------------------------------------------------------------


def test_a_push_the_remote_refuses_is_its_own_error_and_the_record_stays(
    repos: Repositories, where: BranchRemote
) -> None:
    """A remote whose hook refuses the push: a clear error, not FENCED, nothing moved."""
    record = push_branch(where, record_branch(where, BRANCH, TOKEN))
    hook = repos.remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'error: pushes are frozen' >&2\nexit 1\n")
    hook.chmod(0o755)
    repos.commit(repos.agent, "0043: refused")

    with pytest.raises(GitFailed) as failed:
        push_branch(where, record)

    assert str(failed.value) == (
        "git push origin failed: [remote rejected] (pre-receive hook declined) / remote: error: pushes are frozen; "
        f"the remote's refs/heads/{BRANCH} is unchanged at {record.sha}"
    )
    assert failed.value.exit_status == 1
    assert repos.remote_sha() == record.sha


def test_no_such_remote_is_a_git_error(repos: Repositories) -> None:
    with pytest.raises(GitFailed) as failed:
        record_branch(BranchRemote(repos.agent, "upstream"), BRANCH, TOKEN)
    assert str(failed.value).startswith("git ls-remote upstream failed: fatal: 'upstream' does not appear to be a git")


def test_a_directory_outside_any_repository_is_a_git_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git looks no further up than tmp_path
    with pytest.raises(GitFailed) as failed:
        record_branch(BranchRemote(outside), BRANCH, TOKEN)
    assert str(failed.value).startswith(f"git rev-parse failed: {outside} is not in a git repository (fatal: not a git")


@pytest.mark.parametrize(
    ("branch", "message"),
    [
        ("", "bad branch name '': a branch name cannot be empty or start with '-'"),
        ("--force", "bad branch name '--force': a branch name cannot be empty or start with '-'"),
        ("a..b", "bad branch name 'a..b': git does not accept refs/heads/a..b as a ref"),
        ("feat/*", "bad branch name 'feat/*': git does not accept refs/heads/feat/* as a ref"),
    ],
)
def test_a_bad_branch_name_is_a_usage_error(where: BranchRemote, branch: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        record_branch(where, branch, TOKEN)
    assert str(refused.value) == message


def test_a_push_without_the_local_branch_is_a_usage_error(repos: Repositories, where: BranchRemote) -> None:
    record = BranchRecord("feat/elsewhere", TOKEN, None)
    with pytest.raises(UsageError) as refused:
        push_branch(where, record)
    assert str(refused.value) == (
        f"no local branch 'feat/elsewhere' in the project's repository ({repos.agent}): push_branch pushes the "
        "local branch of that name; commit to it first"
    )
    assert repos.remote_sha("feat/elsewhere") is None


# -- bounded, non-interactive, no password in any message ----------------------------------------


@pytest.mark.parametrize("named", [True, False], ids=["named remote", "url as remote"])
def test_no_message_carries_the_password_of_the_remote_url(repos: Repositories, named: bool) -> None:
    if named:
        git(repos.agent, "remote", "add", "private", SECRET_URL)
    where = BranchRemote(repos.agent, "private" if named else SECRET_URL, timeout=20)

    with pytest.raises(GitFailed) as failed:
        record_branch(where, BRANCH, TOKEN)
    with pytest.raises(GitFailed) as push_failed:
        push_branch(where, BranchRecord(BRANCH, TOKEN, None))

    for error in (failed.value, push_failed.value):
        assert "secret" not in str(error) and "secret" not in repr(error.as_json())
        assert "ls-remote" in str(error) or "git push" in str(error)
    if not named:
        assert str(failed.value).startswith("git ls-remote https://user:***@127.0.0.1/repo.git failed: ")


def test_a_git_command_that_hangs_is_stopped_at_its_timeout(repos: Repositories, tmp_path: Path) -> None:
    """A remote whose transport never answers (an ssh command that sleeps) is killed, children and all."""
    stuck = tmp_path / "stuck-ssh"
    stuck.write_text("#!/bin/sh\nsleep 60\n")
    stuck.chmod(0o755)
    git(repos.agent, "config", "core.sshCommand", str(stuck))
    git(repos.agent, "remote", "add", "stuck", "ssh://git@example.invalid/repo.git")

    started = time.monotonic()
    with pytest.raises(GitFailed) as failed:
        record_branch(BranchRemote(repos.agent, "stuck", timeout=1), BRANCH, TOKEN)

    assert time.monotonic() - started < 10
    assert (
        str(failed.value)
        == "git ls-remote stuck failed: timed out after 1s and was stopped (no prompt can be answered)"
    )
    sleeping = subprocess.run(["pgrep", "-f", str(stuck)], capture_output=True, text=True)
    assert sleeping.stdout == "", "the stuck transport was left running"

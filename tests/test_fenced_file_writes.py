"""Fenced writes to project files, on real files: a compare-and-swap on the file's sha256.

A write with the hash of an older read is FENCED and leaves the file as the other writer left it;
the control, a plain write, overwrites that writer's change. Paths are confined to the project's
directory: each way out (``..``, an absolute path, a symbolic link to outside, writing through a
symbolic link, a missing directory) is a usage error and nothing is written anywhere.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from pathlib import Path

import pytest

from fencemigrate.agent_server.files import ABSENT, FileContent, read_file, write_file
from fencemigrate.errors import Fenced, LeaseBusy, UsageError

TOKEN = 34
PATH = "migrations/versions/0042_add_invoice_currency.py"
A_READ = "# 0042 as agent A read it\n"
B_WROTE = "# 0042 as agent B rewrote it\n"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with PATH holding A_READ, beside an ``outside`` directory."""
    root = tmp_path / "project"
    (root / "migrations" / "versions").mkdir(parents=True)
    (root / PATH).write_text(A_READ)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("outside\n")
    return root


def snapshot(tmp_path: Path) -> dict[str, str]:
    """Every file under ``tmp_path`` (links not followed) and its content: to show nothing was written."""
    return {
        str(path.relative_to(tmp_path)): (f"-> {os.readlink(path)}" if path.is_symlink() else path.read_text())
        for path in sorted(tmp_path.rglob("*"))
        if path.is_symlink() or path.is_file()
    }


def fenced_text(path: str, expected: str, found: str = "has another sha256") -> str:
    return "\n".join(
        [
            f"FENCED: this write to file:{path} is not yours to make.",
            f"Rejected for token {TOKEN}: {path} {found} on disk, not {expected} as you read it; nothing was written.",
            "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
            "Your plan and your memory of this resource are probably stale, including anything",
            "your context summary says you 'hold'.",
            f"Next step: read {path} again and re-plan from what it holds now.",
            "If your goal is already met by the current state, report that and stop.",
        ]
    )


# -- the compare-and-swap ------------------------------------------------------------------------


def test_a_write_with_a_stale_hash_is_fenced_and_the_file_unchanged(project: Path) -> None:
    read = read_file(project, PATH)  # agent A reads
    assert read == FileContent(A_READ, sha(A_READ))
    (project / PATH).write_text(B_WROTE)  # agent B rewrites the file meanwhile

    with pytest.raises(Fenced) as fenced:
        write_file(project, PATH, "# A's stale plan\n", read.sha256, TOKEN)

    assert str(fenced.value) == fenced_text(PATH, sha(A_READ))
    assert sha(B_WROTE) not in str(fenced.value)  # the hash on disk is never told (read_file may withhold it)
    assert (fenced.value.resource, fenced.value.token, fenced.value.exit_status) == (f"file:{PATH}", TOKEN, 3)
    assert (project / PATH).read_text() == B_WROTE


def test_control_a_plain_write_overwrites_the_other_writers_change(project: Path) -> None:
    (project / PATH).read_text()  # agent A reads
    (project / PATH).write_text(B_WROTE)  # agent B rewrites the file meanwhile
    (project / PATH).write_text("# A's stale plan\n")  # A writes without a fence
    assert (project / PATH).read_text() == "# A's stale plan\n"  # B's change is lost


def test_a_write_with_the_current_hash_replaces_the_file_and_returns_its_hash(project: Path, tmp_path: Path) -> None:
    (project / PATH).chmod(0o640)
    before = os.stat(project / PATH).st_ino

    new_sha = write_file(project, PATH, "# 0042, A's version\n", sha(A_READ), TOKEN)

    assert new_sha == sha("# 0042, A's version\n")
    assert (project / PATH).read_text() == "# 0042, A's version\n"
    assert oct(os.stat(project / PATH).st_mode & 0o7777) == oct(0o640)  # the mode is kept
    assert os.stat(project / PATH).st_ino != before  # replaced (a new inode), not written in place
    assert sorted(os.listdir(project / "migrations" / "versions")) == ["0042_add_invoice_currency.py"]
    assert write_file(project, PATH, "# again\n", new_sha.upper(), TOKEN) == sha("# again\n")  # the hash it returned


def test_absent_creates_a_new_file_and_is_fenced_once_it_exists(project: Path) -> None:
    new = "migrations/versions/0043_next.py"
    assert write_file(project, new, "# 0043\n", ABSENT, TOKEN) == sha("# 0043\n")
    assert (project / new).read_text() == "# 0043\n"
    assert oct(os.stat(project / new).st_mode & 0o777) == oct(0o666 & ~_umask())

    with pytest.raises(Fenced) as fenced:  # someone else's new file is not overwritten either
        write_file(project, new, "# 0043, mine\n", ABSENT, TOKEN)
    assert fenced.value.reason == (
        f"{new} exists on disk, not absent (no such file) as you read it; nothing was written"
    )
    assert (project / new).read_text() == "# 0043\n"


def test_a_file_deleted_since_it_was_read_is_fenced(project: Path) -> None:
    (project / PATH).unlink()
    with pytest.raises(Fenced) as fenced:
        write_file(project, PATH, "# A\n", sha(A_READ), TOKEN)
    assert str(fenced.value) == fenced_text(PATH, sha(A_READ), "is absent (no such file)")
    assert not (project / PATH).exists()


def test_concurrent_writers_with_the_same_read_one_wins(project: Path) -> None:
    """Eight threads write with the hash they all read: the lock lets exactly one through."""
    outcomes: list[str] = []

    def write(n: int) -> None:
        try:
            write_file(project, PATH, f"# writer {n}\n", sha(A_READ), TOKEN)
            outcomes.append(f"wrote {n}")
        except Fenced:
            outcomes.append("fenced")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [outcome for outcome in outcomes if outcome.startswith("wrote")]
    assert len(winners) == 1 and outcomes.count("fenced") == 7
    assert (project / PATH).read_text() == f"# writer {winners[0].split()[1]}\n"


def test_a_write_waits_for_the_lock_of_another_fenced_write(project: Path) -> None:
    """While another fenced write holds its directory's lock, the write does not check or replace."""
    directory = os.open(project / "migrations" / "versions", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        with pytest.raises(LeaseBusy) as busy:
            write_file(project, PATH, "# A\n", sha(A_READ), TOKEN, lock_timeout=0.2)
        assert str(busy.value) == (
            f"lease on file:{PATH} is busy: another fenced write to its directory held the lock for 0.2s; "
            "this is transient, try again later"
        )
        assert (project / PATH).read_text() == A_READ
    finally:
        os.close(directory)
    assert write_file(project, PATH, "# A\n", sha(A_READ), TOKEN) == sha("# A\n")


# -- confined to the project's directory ---------------------------------------------------------


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../outside/secret.txt", "'..' is not allowed; the path must stay inside the project's directory"),
        (
            "migrations/../../outside/secret.txt",
            "'..' is not allowed; the path must stay inside the project's directory",
        ),
        ("{tmp}/outside/secret.txt", "an absolute path; give it relative to the project's directory"),
        ("", "give a file's path relative to the project's directory"),
        ("migrations/", "it names a directory, not a file"),
        (".", "it names a directory, not a file"),
        ("migrations", "not a regular file"),
        ("migrations/new/0043.py", "directory 'migrations/new' does not exist (write_file creates no directories)"),
        (
            "migrations/versions/0042_add_invoice_currency.py/x",
            "'migrations/versions/0042_add_invoice_currency.py' "
            "is not a directory of the project (or was replaced by a symbolic link)",
        ),
    ],
)
def test_paths_outside_the_project_are_refused(project: Path, tmp_path: Path, path: str, message: str) -> None:
    path = path.format(tmp=tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(UsageError) as refused:
        write_file(project, path, "overwritten\n", ABSENT, TOKEN)
    assert str(refused.value) == f"bad path {path!r}: {message}"
    assert refused.value.exit_status == 2
    assert snapshot(tmp_path) == before
    assert not (project / "migrations" / "new").exists()


GIT_REFUSAL = (
    "inside .git/, the repository's own files (its config and hooks run commands, its refs decide what "
    "push_branch pushes); only the project's files can be read or written"
)


@pytest.mark.parametrize("path", [".git/config", ".git/hooks/pre-push", ".GIT/config", "migrations/.git/HEAD"])
def test_the_repositorys_own_files_are_refused(project: Path, tmp_path: Path, path: str) -> None:
    """Its config (``receivepack``, ``core.hooksPath``), hooks and refs would run commands or choose what
    push_branch pushes: no write or read there, however the path is spelled."""
    (project / ".git" / "hooks").mkdir(parents=True)
    (project / "migrations" / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    before = snapshot(tmp_path)
    with pytest.raises(UsageError) as refused:
        write_file(project, path, "[remote]\n", ABSENT, TOKEN)
    assert str(refused.value) == f"bad path {path!r}: {GIT_REFUSAL}"
    with pytest.raises(UsageError):
        read_file(project, path)
    assert snapshot(tmp_path) == before


def test_a_symlink_into_the_repositorys_files_is_refused(project: Path, tmp_path: Path) -> None:
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("[core]\n")
    (project / "gitdir").symlink_to(project / ".git")
    before = snapshot(tmp_path)
    with pytest.raises(UsageError) as refused:
        write_file(project, "gitdir/config", "[remote]\n", sha("[core]\n"), TOKEN)
    assert str(refused.value) == f"bad path 'gitdir/config': {GIT_REFUSAL}"
    assert snapshot(tmp_path) == before


def test_control_a_plain_write_into_the_repositorys_config_goes_through(project: Path) -> None:
    (project / ".git").mkdir()
    (project / "gitdir").symlink_to(project / ".git")
    (project / "gitdir" / "config").write_text('[remote "origin"]\n\treceivepack = touch /tmp/owned\n')
    assert "receivepack" in (project / ".git" / "config").read_text()


def test_a_path_longer_than_the_system_allows_is_a_usage_error(project: Path) -> None:
    for path in ("x" * 256, "a/" * 2100 + "f"):
        with pytest.raises(UsageError, match="longer than a path"):
            write_file(project, path, "x\n", ABSENT, TOKEN)


def test_a_symlinked_directory_leading_outside_is_refused(project: Path, tmp_path: Path) -> None:
    (project / "migrations" / "linked").symlink_to(tmp_path / "outside")
    before = snapshot(tmp_path)
    for expected in (ABSENT, sha("outside\n")):
        with pytest.raises(UsageError) as refused:
            write_file(project, "migrations/linked/secret.txt", "overwritten\n", expected, TOKEN)
        assert str(refused.value) == (
            "bad path 'migrations/linked/secret.txt': a symbolic link on the way leads outside the project's "
            f"directory (to {(tmp_path / 'outside').resolve()})"
        )
    assert snapshot(tmp_path) == before


def test_control_a_plain_write_through_the_symlinked_directory_lands_outside(project: Path, tmp_path: Path) -> None:
    (project / "migrations" / "linked").symlink_to(tmp_path / "outside")
    (project / "migrations" / "linked" / "secret.txt").write_text("overwritten\n")
    assert (tmp_path / "outside" / "secret.txt").read_text() == "overwritten\n"


@pytest.mark.parametrize("target", ["outside", "inside"])
def test_writing_through_a_symlinked_file_is_refused(project: Path, tmp_path: Path, target: str) -> None:
    pointed = tmp_path / "outside" / "secret.txt" if target == "outside" else project / PATH
    (project / "migrations" / "link.py").symlink_to(pointed)
    before = snapshot(tmp_path)
    with pytest.raises(UsageError) as refused:
        write_file(project, "migrations/link.py", "overwritten\n", sha(pointed.read_text()), TOKEN)
    assert str(refused.value) == (
        "bad path 'migrations/link.py': a symbolic link; write to the file it points to, not through it"
    )
    assert snapshot(tmp_path) == before


def test_a_symlinked_directory_inside_the_project_is_followed(project: Path) -> None:
    """A link that stays inside the project leads to the directory it names; the write lands there."""
    (project / "versions").symlink_to(project / "migrations" / "versions")
    path = "versions/0042_add_invoice_currency.py"
    assert write_file(project, path, "# via the link\n", sha(A_READ), TOKEN) == sha("# via the link\n")
    assert (project / PATH).read_text() == "# via the link\n"
    assert (project / "versions").is_symlink()


@pytest.mark.parametrize("expected", ["", "deadbeef", "z" * 64, "none"])
def test_a_bad_expected_hash_is_a_usage_error(project: Path, expected: str) -> None:
    with pytest.raises(UsageError) as refused:
        write_file(project, PATH, "# A\n", expected, TOKEN)
    assert str(refused.value) == (
        f"bad expected_sha256 {expected!r}: give the sha256 of the file as you read it (64 hex digits), "
        "or 'absent' for a file that must not exist yet"
    )
    assert (project / PATH).read_text() == A_READ


def test_reading_a_missing_file_is_a_usage_error(project: Path) -> None:
    with pytest.raises(UsageError) as refused:
        read_file(project, "migrations/versions/0099.py")
    assert str(refused.value) == (
        "no file 'migrations/versions/0099.py' in the project's directory (write it with expected_sha256 'absent')"
    )

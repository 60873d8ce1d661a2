"""The documentation: the generated references are current, the README stays short and keeps its
two commands, and every relative link in the README and docs/ leads to a file and heading that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fencemigrate.cli.reference import REFERENCES

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"
WRITE = "python -m fencemigrate.cli.reference --write"

# The Markdown files whose links are checked: the README, docs/ and the benchmarks' READMEs.
PAGES = sorted([README, *DOCS.glob("*.md"), REPO / "bench" / "README.md", REPO / "bench" / "faults" / "README.md"])

LINK = re.compile(r"(?<!!)\[(?:[^\]`]|`[^`]*`)*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_the_generated_references_are_current(name: str) -> None:
    written = (DOCS / name).read_text() if (DOCS / name).is_file() else None
    assert written == REFERENCES[name](), f"docs/{name} is out of date: run `{WRITE}`"


def test_the_reference_command_reports_a_stale_reference(tmp_path: Path) -> None:
    def reference(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "fencemigrate.cli.reference", *args]
        return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)

    assert reference("--check", "--docs", str(DOCS)).returncode == 0
    (tmp_path / "commands.md").write_text("# Commands\n")
    stale = reference("--check", "--docs", str(tmp_path))
    assert (stale.returncode, stale.stdout) == (1, "")
    assert stale.stderr == "".join(f"docs/{name} is out of date: run `{WRITE}`\n" for name in REFERENCES)
    written = reference("--write", "--docs", str(tmp_path))
    assert written.returncode == 0
    assert written.stdout == "".join(f"wrote {tmp_path / name}\n" for name in REFERENCES)
    assert reference("--check", "--docs", str(tmp_path)).returncode == 0


def test_the_readme_is_short_and_keeps_its_two_commands() -> None:
    readme = README.read_text()
    assert len(readme.splitlines()) < 200
    assert "bash .ci/demo   # installs everything, replays the incident on fresh SQLite files (no server)\n" in readme
    assert (
        "bash .ci/test   # installs everything, starts throwaway PostgreSQL, MariaDB and Redis, runs the tests\n"
        in readme
    )
    assert (REPO / ".ci" / "demo").is_file() and (REPO / ".ci" / "test").is_file()
    assert "bash .ci/test" in (REPO / ".ci" / "run").read_text()


def test_the_index_links_every_page_of_docs() -> None:
    index = (DOCS / "index.md").read_text()
    linked = {target.split("#")[0] for target in LINK.findall(index)}
    assert sorted(page.name for page in DOCS.glob("*.md") if page.name not in linked | {"index.md"}) == []


def test_every_relative_link_leads_to_a_file_and_heading_that_exist() -> None:
    broken = [
        f"{page.relative_to(REPO)}: {target}"
        for page in PAGES
        for target in LINK.findall(_prose(page.read_text()))
        if not _resolves(page, target)
    ]
    assert broken == []


def _resolves(page: Path, target: str) -> bool:
    if re.match(r"[a-z]+:", target):
        return True  # an absolute URL: not checked here
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
        return False
    return not anchor or (file.suffix == ".md" and anchor in _anchors(file.read_text()))


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks and code spans, where brackets are not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`(?!\])", "", text)


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of ``text`` (a repeated heading gets ``-1``, ``-2``...)."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL), re.M):
        slug = "".join(char for char in heading.lower() if char.isalnum() or char in " -_").replace(" ", "-")
        candidate, count = slug, 0
        while candidate in anchors:
            count += 1
            candidate = f"{slug}-{count}"
        anchors.add(candidate)
    return anchors

"""``fencemigrate --help`` states the exit statuses and lists every command's whole first sentence;
usage errors that click raises itself are one JSON object with ``--json`` (control: click's own
text without it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.in_process import run_in_process
from support.project import Result

from fencemigrate.cli import main

WIDTH = {"COLUMNS": "80"}


def fm(tmp_path: Path, *args: str) -> Result:
    return run_in_process(tmp_path, *args, env=WIDTH)


def section(text: str, title: str) -> list[str]:
    """The lines of a help section, up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def test_help_ends_with_the_exit_statuses(tmp_path: Path) -> None:
    result = fm(tmp_path, "--help").check()
    assert result.stdout.splitlines()[-9:] == [
        "Exit statuses:",
        "  0    success",
        "  1    error: the database refused or was unreachable, or a revision failed",
        "  2    bad usage: unknown option, bad token, unknown revision, bad config",
        "  3    FENCED or lease lost: not transient; re-read the state and re-plan",
        "  4    lease busy: another live holder has the lease; try again later",
        "  5    dirty: a pre-check revision never finished; see fencemigrate resolve",
        "  130  stopped by SIGINT: rolled back, lease released",
        "  143  stopped by SIGTERM: rolled back, lease released",
    ]


def test_help_lists_each_commands_whole_first_sentence(tmp_path: Path) -> None:
    lines = section(fm(tmp_path, "--help").check().stdout, "Commands")
    assert not [line for line in lines if line.endswith("...")]
    check = lines.index("  check           Lint the migrations and the database for what breaks fencing")
    assert lines[check + 2] == "                  as alembic check does (--no-db: the revision files alone)."
    install = lines.index("  install         Install the fence schema (done automatically on the first")
    assert lines[install + 1] == "                  fenced run), put back its guard and guard the version table."
    assert "  revision        Create a new revision file, as alembic revision." in lines
    # Every command: its row, continuation lines joined, is the first sentence of its help.
    rows: dict[str, str] = {}
    for line in lines:
        if line[2] != " ":
            name, _, text = line.strip().partition(" ")
            rows[name] = text.strip()
        else:
            rows[name] += " " + line.strip()
    for name, command in main.commands.items():
        first = " ".join((command.help or "").split("\n\n")[0].split())
        assert first.startswith(rows[name].replace("fence- aware", "fence-aware")), name
        assert rows[name].endswith("."), name


def test_lease_help_lists_whole_sentences_too(tmp_path: Path) -> None:
    lines = section(fm(tmp_path, "lease", "--help").check().stdout, "Commands")
    assert lines[-2:] == [
        "  status   Show who holds the lease, its token and when it expires (by the",
        "           service's clock).",
    ]


def test_authoring_commands_say_they_take_no_token(tmp_path: Path) -> None:
    for command in ("revision", "merge", "edit", "init"):
        text = " ".join(fm(tmp_path, command, "--help").check().stdout.split())
        assert "no token and no lease" in text or "no token, no lease" in text, command
    text = " ".join(fm(tmp_path, "ensure_version", "--help").check().stdout.split())
    assert "it takes no token and no lease; on a fenced database the new table is guarded" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["upgrade", "head", "--bogus", "--json"], "No such option '--bogus'."),
        (["--json", "revision", "--bogus"], "No such option '--json'. Did you mean '--version'?"),
        (["revision", "--json", "--bogus"], "No such option '--bogus'."),
        (["upgrade", "--json"], "Missing argument 'REVISION'."),
        (["merge", "--json"], "Missing argument 'REVISIONS...'."),
        (
            ["check", "--format", "nope", "--json"],
            "Invalid value for '--format': 'nope' is not one of 'text', 'github'.",
        ),
        (["lease", "acquire", "--json", "--bogus"], "No such option '--bogus'."),
        (["nosuch", "--json"], "No such command 'nosuch'."),
        (["install", "--json", "--sql", "--grant-to"], "Option '--grant-to' requires an argument."),
    ],
)
def test_usage_errors_are_json_with_json(tmp_path: Path, args: list[str], message: str) -> None:
    result = fm(tmp_path, *args)
    assert (result.code, result.stderr) == (2, ""), result
    assert json.loads(result.stdout) == {"status": "usage", "message": message}
    control = fm(tmp_path, *[arg for arg in args if arg != "--json"])
    assert control.code == 2 and control.stdout == ""
    assert control.stderr.splitlines()[-1].startswith("Error: ")

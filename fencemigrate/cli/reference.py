"""The two generated references in ``docs/``: ``commands.md`` from the click definitions and
``check-rules.md`` from the rule classes.

    python -m fencemigrate.cli.reference --write   # rewrite both from the code
    python -m fencemigrate.cli.reference --check   # exit 1 naming each one that is out of date

``tests/test_docs.py`` runs the check, so a command, option or rule changed without its reference
fails the suite.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import click

from ..errors import EXIT_STATUSES
from ..lint.rules import RULES, Rule
from . import main as cli

DOCS = Path(__file__).resolve().parents[2] / "docs"
WRITE = "python -m fencemigrate.cli.reference --write"


def commands(group: click.Group, parent: click.Context) -> Iterator[tuple[click.Context, click.Command]]:
    """Every command under ``group``, groups included, in the order ``--help`` lists them, each
    with its context (whose ``command_path`` is ``fencemigrate lease acquire``)."""
    for name in group.list_commands(parent):
        command = group.get_command(parent, name)
        assert command is not None
        context = click.Context(command, info_name=name, parent=parent, **command.context_settings)
        yield context, command
        if isinstance(command, click.Group):
            yield from commands(command, context)


def commands_md() -> str:
    """docs/commands.md: every command with its usage, its help, and its options' help and defaults."""
    root = click.Context(cli, info_name="fencemigrate", **cli.context_settings)  # -h as well as --help
    listed = [(root, cli), *commands(cli, root)]
    lines = [
        "# Commands",
        "",
        _generated("the click definitions in `fencemigrate/cli/`"),
        "",
        "Every command also takes `-h`/`--help`. What they do beyond their options: [the command "
        "line](cli.md); what they print with `--json`: [JSON output](json.md).",
        "",
        *(f"- [`{context.command_path}`](#{_slug(context.command_path)})" for context, _ in listed),
    ]
    for context, command in listed:
        lines += ["", f"## `{context.command_path}`", "", "```", _usage(context, command), "```"]
        lines += ["", inspect.cleandoc(command.help or "")]
        options = [param for param in command.params if isinstance(param, click.Option)]
        if options:
            lines += ["", "| option | meaning | default |", "|---|---|---|"]
            lines += [_option_row(context, option) for option in options]
        if isinstance(command, click.Group):
            lines += [
                "",
                "Commands: " + ", ".join(_command_link(context, name) for name in command.list_commands(context)),
            ]
    lines += ["", "## Exit statuses", "", "| status | meaning |", "|---|---|"]
    lines += [f"| {status} | {_cell(meaning)} |" for status, meaning in EXIT_STATUSES]
    lines += ["", "In full: [exit statuses](exit-statuses.md)."]
    return "\n".join(lines) + "\n"


def check_rules_md() -> str:
    """docs/check-rules.md: every rule with its id, name, severity, what it finds and its fix."""
    lines = [
        "# Check rules",
        "",
        _generated("the rule classes in `fencemigrate/lint/rules/`"),
        "",
        "The rules of `fencemigrate check`, in the order they run; how to run them, allow a finding and "
        "read the output: [CI schema checks](ci-checks.md). Database rules (`--db`, the default) do not run "
        "with `--no-db`.",
        "",
        "| id | name | severity | finds |",
        "|---|---|---|---|",
    ]
    for rule in RULES:
        reads = "`--db`: " if rule.needs_database else ""
        lines.append(f"| {rule.id} | `{rule.name}` | {rule.severity.value} | {reads}{_cell(rule.summary)} |")
    for rule in RULES:
        lines += ["", f"## {rule.id} {rule.name}", "", _description(rule)]
        lines += ["", f"Severity: {rule.severity.value}; {_reads(rule)}."]
        lines += ["", f"Finds: {rule.summary}.", "", f"Fix: {rule.fix}."]
    return "\n".join(lines) + "\n"


REFERENCES: dict[str, Callable[[], str]] = {"commands.md": commands_md, "check-rules.md": check_rules_md}


def out_of_date(docs: Path = DOCS) -> list[str]:
    """The references in ``docs`` that differ from what this module generates (or are missing)."""
    return [
        name
        for name, generate in REFERENCES.items()
        if not (docs / name).is_file() or (docs / name).read_text() != generate()
    ]


def write(docs: Path = DOCS) -> list[str]:
    """Rewrite the references that are out of date; the names of those it rewrote."""
    stale = out_of_date(docs)
    for name in stale:
        (docs / name).write_text(REFERENCES[name]())
    return stale


def run(argv: Sequence[str] | None = None) -> int:
    """The command line: ``--write`` or ``--check`` (exit 1 when a reference is out of date)."""
    parser = argparse.ArgumentParser(prog="python -m fencemigrate.cli.reference", description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the references that are out of date")
    action.add_argument("--check", action="store_true", help="exit 1 when a reference is out of date")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the docs directory (default: the checkout's)")
    arguments = parser.parse_args(argv)
    if arguments.write:
        for name in write(arguments.docs):
            print(f"wrote {arguments.docs / name}")
        return 0
    stale = out_of_date(arguments.docs)
    for name in stale:
        print(f"docs/{name} is out of date: run `{WRITE}`", file=sys.stderr)
    return 1 if stale else 0


def _generated(source: str) -> str:
    return f"<!-- Generated from {source} by `{WRITE}`: edit the code, not this file. -->"


def _usage(context: click.Context, command: click.Command) -> str:
    return " ".join([context.command_path, *command.collect_usage_pieces(context)])


def _option_row(context: click.Context, option: click.Option) -> str:
    names = ", ".join(f"`{name}`" for name in [*option.opts, *option.secondary_opts])
    if not option.is_flag:
        names += f" `{option.make_metavar(context)}`"
    if option.multiple:
        names += " (repeatable)"
    default = option.get_default(context, call=False)
    shown = f"`{default}`" if isinstance(default, (str, int)) and not isinstance(default, bool) else ""
    meaning = ("required. " if option.required else "") + (option.help or "")
    return f"| {_cell(names)} | {_cell(meaning)} | {shown} |"


def _command_link(parent: click.Context, name: str) -> str:
    path = f"{parent.command_path} {name}"
    return f"[`{name}`](#{_slug(path)})"


def _description(rule: Rule) -> str:
    """The class docstring without its ``FM201:`` / ``FM206 (warning):`` prefix."""
    text = inspect.getdoc(type(rule)) or ""
    text = text.split(":", 1)[1].strip() if text.startswith(rule.id) else text
    return text[:1].upper() + text[1:]


def _reads(rule: Rule) -> str:
    if rule.needs_models:
        return "reads the database and the models (`--db`)"
    return "reads the database (`--db`)" if rule.needs_database else "reads the revision files"


def _cell(text: str) -> str:
    """``text`` for a Markdown table cell: pipes escaped, and ``*`` outside code spans."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(part if index % 2 else part.replace("*", "\\*") for index, part in enumerate(parts))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (the code spans' backticks dropped)."""
    kept = "".join(char for char in heading.lower() if char.isalnum() or char in " -_")
    return kept.replace(" ", "-")


if __name__ == "__main__":
    sys.exit(run())

"""fencemigrate's command line is Alembic's, checked against the installed Alembic's own parser.

Alembic's ``CommandLine().parser`` (argparse, one subparser per command) is read when the tests
are collected: every subcommand and every option it has must exist in fencemigrate's click group
with the same names (short and long), the same arity (a flag, an option taking one value, an
option given several times, positionals with the same names and counts), the same default, and
a negative number (``-1``) read as a positional argument, as argparse reads it. Alembic's
top-level options (-c, -n, -x, --raiseerr, -q, --version) belong to the group. A new Alembic
release that adds a command or an option fails here, listing each gap.

fencemigrate adds options and commands of its own (``--token``, ``lease``, ...). Where it
differs from Alembic in one of Alembic's, :data:`DELIBERATE` names the difference and says why.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import click
import pytest
from alembic.config import CommandLine

from fencemigrate.cli import main

_PARSER = CommandLine().parser
_SUBPARSERS = next(action for action in _PARSER._actions if isinstance(action, argparse._SubParsersAction))
_COMMANDS: dict[str, argparse.ArgumentParser] = dict(_SUBPARSERS.choices)

_FLAG_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction, argparse._VersionAction)


DELIBERATE = {
    "init: option --template/-t defaults to 'fencemigrate' here, 'generic' in Alembic":
        "init writes the fence-aware environment unless told otherwise; -t generic gives Alembic's",
}
"""Gaps that are decisions, each with its reason."""


def _group_context() -> click.Context:
    return click.Context(main, info_name="fencemigrate", **main.context_settings)


def _option_gaps(where: str, parser: argparse.ArgumentParser, command: click.Command, ctx: click.Context) -> Iterator[str]:
    """Each of ``parser``'s options that ``command`` lacks or reads differently."""
    params = [param for param in command.get_params(ctx) if isinstance(param, click.Option)]
    for action in parser._actions:
        if not action.option_strings:
            continue
        names = sorted(action.option_strings)
        found = [param for param in params if set(param.opts + param.secondary_opts) & set(names)]
        if not found:
            yield f"{where}: missing option {'/'.join(names)}"
            continue
        option = found[0]
        if sorted(option.opts + option.secondary_opts) != names:
            yield f"{where}: option {'/'.join(names)} is {'/'.join(sorted(option.opts + option.secondary_opts))} here"
        expected, actual = _arity(action), _click_arity(option)
        if expected != actual:
            yield f"{where}: option {'/'.join(names)} is {actual} here, {expected} in Alembic"
        default = None if action.default is argparse.SUPPRESS else action.default
        if expected == "a value" and default is not None and option.default != default:
            yield f"{where}: option {'/'.join(names)} defaults to {option.default!r} here, {default!r} in Alembic"


def _arity(action: argparse.Action) -> str:
    if isinstance(action, _FLAG_ACTIONS):
        return "a flag"
    if isinstance(action, argparse._AppendAction):
        return "repeatable"
    if isinstance(action, argparse._CountAction):
        return "a count"
    assert isinstance(action, argparse._StoreAction) and action.nargs is None, f"unknown argparse action {action}"
    return "a value"


def _click_arity(option: click.Option) -> str:
    if option.count:
        return "a count"
    if option.is_flag:
        return "a flag"
    if option.multiple and option.nargs == 1:
        return "repeatable"
    return "a value" if option.nargs == 1 else f"{option.nargs} values"


_NARGS = {None: (1, True), "?": (1, False), "+": (-1, True), "*": (-1, False)}


def _positional_gaps(where: str, parser: argparse.ArgumentParser, command: click.Command, ctx: click.Context) -> Iterator[str]:
    """``parser``'s positionals, in order, as ``command``'s arguments: names, counts, ``-1`` read as one."""
    wanted = [(action.dest, *_NARGS[action.nargs]) for action in parser._actions if not action.option_strings]  # type: ignore[index]
    arguments = [param for param in command.get_params(ctx) if isinstance(param, click.Argument)]
    have = [(param.name, param.nargs, param.required) for param in arguments]
    if have != wanted:
        yield f"{where}: positionals (name, nargs, required) are {have} here, {wanted} in Alembic"
        return
    if not wanted:
        return
    try:
        parsed = command.make_context(where, ["-1"] * len(wanted), parent=ctx.parent)
    except click.UsageError as error:
        yield f"{where}: `{where} -1` is a usage error here ({error.format_message()}); Alembic reads -1 as a revision"
        return
    for name, nargs, _ in wanted:
        value = parsed.params[name]
        if value != ("-1" if nargs == 1 else ("-1",)):
            yield f"{where}: `{where} -1` gives {name}={value!r}"


def _gaps_of(name: str) -> list[str]:
    group_ctx = _group_context()
    command = main.commands.get(name)
    if command is None:
        return [f"missing command {name!r}"]
    ctx = click.Context(command, parent=group_ctx, info_name=name)
    parser = _COMMANDS[name]
    gaps = [*_option_gaps(name, parser, command, ctx), *_positional_gaps(name, parser, command, ctx)]
    return [gap for gap in gaps if gap not in DELIBERATE]


def test_alembic_has_the_commands_this_test_reads() -> None:
    """A guard on the test itself: it reads Alembic's parser, not an empty one."""
    assert {"upgrade", "downgrade", "stamp", "current", "history", "heads", "show"} <= set(_COMMANDS)


def test_top_level_options_match_alembic() -> None:
    """-c/--config (repeatable), -n/--name, -x (repeatable), --raiseerr, -q/--quiet, --version, -h."""
    ctx = _group_context()
    gaps = list(_option_gaps("fencemigrate", _PARSER, main, ctx))
    assert not gaps, "gaps from alembic's top-level options:\n" + "\n".join(gaps)


@pytest.mark.parametrize("name", sorted(_COMMANDS))
def test_command_matches_alembic(name: str) -> None:
    """Alembic's command ``name`` exists with every option and positional Alembic gives it."""
    gaps = _gaps_of(name)
    assert not gaps, f"gaps from `alembic {name}`:\n" + "\n".join(gaps)

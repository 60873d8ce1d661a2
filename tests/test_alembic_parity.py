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
from pathlib import Path

import click
import pytest
from alembic.config import CommandLine
from support.in_process import run_in_process

from fencemigrate.cli import main

_PARSER = CommandLine().parser
_SUBPARSERS = next(action for action in _PARSER._actions if isinstance(action, argparse._SubParsersAction))
_COMMANDS: dict[str, argparse.ArgumentParser] = dict(_SUBPARSERS.choices)

_FLAG_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction, argparse._VersionAction)


DELIBERATE = {
    "init: option --template/-t defaults to 'fencemigrate' here, 'generic' in Alembic": "init writes the fence-aware environment unless told otherwise; -t generic gives Alembic's",
}
"""Gaps that are decisions, each with its reason."""


def _group_context() -> click.Context:
    return click.Context(main, info_name="fencemigrate", **main.context_settings)


def _option_gaps(
    where: str, parser: argparse.ArgumentParser, command: click.Command, ctx: click.Context
) -> Iterator[str]:
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


def _positional_gaps(
    where: str, parser: argparse.ArgumentParser, command: click.Command, ctx: click.Context
) -> Iterator[str]:
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


# -- argparse's spellings: abbreviated long options, -X=value ------------------------------------


def _long_options(parser: argparse.ArgumentParser) -> list[str]:
    return [name for action in parser._actions for name in action.option_strings if name.startswith("--")]


def _shortest_prefixes(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, list[str]]]:
    """Each long option of ``parser`` (but --help and --version, which exit), its shortest prefix that
    names no other of ``parser``'s long options (so argparse takes it for the option), and the
    arguments that go with it: its value, if it takes one, and the command's required positionals."""
    longs = _long_options(parser)
    positionals = ["head" for action in parser._actions if not action.option_strings and action.nargs in (None, "+")]
    for action in parser._actions:
        for option in (name for name in action.option_strings if name.startswith("--")):
            if option in ("--help", "--version"):
                continue
            prefix = _shortest_unique_prefix(option, longs)
            if prefix != option:
                yield option, prefix, [*(["x"] if _arity(action) in ("a value", "repeatable") else []), *positionals]


def _shortest_unique_prefix(option: str, longs: list[str]) -> str:
    """The shortest prefix of ``option`` that no other of ``longs`` starts with (``option`` itself
    when it is a prefix of another)."""
    return next(
        option[:end]
        for end in range(3, len(option) + 1)
        if [name for name in longs if name.startswith(option[:end])] == [option]
    )


_ABBREVIATIONS = [
    (name, *abbreviation) for name, parser in sorted(_COMMANDS.items()) for abbreviation in _shortest_prefixes(parser)
]


def _fencemigrate_params(name: str, args: list[str]) -> dict[str, object]:
    return main.commands[name].make_context(name, args, parent=_group_context()).params


@pytest.mark.parametrize(
    ("name", "option", "prefix", "rest"), _ABBREVIATIONS, ids=[f"{n} {p}" for n, _, p, _ in _ABBREVIATIONS]
)
def test_an_abbreviation_alembic_accepts_means_the_same_here(
    name: str, option: str, prefix: str, rest: list[str]
) -> None:
    """`alembic NAME PREFIX` is `alembic NAME OPTION` (the control); so it is here, unless fencemigrate's
    own options (--token, --holder, --ttl, --preempt) share the prefix: then click's usage error names
    the candidates, as argparse's "ambiguous option" (exit 2), and the shortest prefix unique here works."""
    parser = _COMMANDS[name]
    assert parser.parse_args([prefix, *rest]) == parser.parse_args([option, *rest])
    full = _fencemigrate_params(name, [option, *rest])
    command_ctx = click.Context(main.commands[name], parent=_group_context())
    here = _long_options_here(main.commands[name], command_ctx)
    if [o for o in here if o.startswith(prefix)] != [option]:
        own = [o for o in here if o.startswith(prefix) and o not in _long_options(parser)]
        assert own, f"{prefix} is ambiguous here only among Alembic's own options"
        with pytest.raises(click.UsageError) as ambiguous:
            _fencemigrate_params(name, [prefix, *rest])
        assert ambiguous.value.exit_code == 2
        candidates = ", ".join(o for o in here if o.startswith(prefix))
        assert ambiguous.value.format_message() == f"ambiguous option: {prefix} could match {candidates}"
        prefix = _shortest_unique_prefix(option, here)
    assert _fencemigrate_params(name, [prefix, *rest]) == full
    if rest[:1] == ["x"]:  # the value after "=": --rev=x
        assert _fencemigrate_params(name, [f"{prefix}=x", *rest[1:]]) == full


def _long_options_here(command: click.Command, ctx: click.Context) -> list[str]:
    return [
        name
        for param in command.get_params(ctx)
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
        if name.startswith("--")
    ]


def test_top_level_abbreviations_and_short_values_mean_the_same_here() -> None:
    """Before the command, `--raise`, `--conf F`, `--na N`, `--qu` and `-c=F` (each accepted by
    Alembic's parser, the control) set the same options as in full; the command's own arguments
    are left to it."""
    for option, prefix, value in _shortest_prefixes(_PARSER):
        control = _PARSER.parse_args([prefix, *value[:1], "current"])
        assert control == _PARSER.parse_args([option, *value[:1], "current"])
        spelled = main.make_context("fencemigrate", [prefix, *value[:1], "current", "--verb"])
        assert spelled.params == main.make_context("fencemigrate", [option, *value[:1], "current", "--verb"]).params
        assert spelled.args[-1] == "--verb"  # the command's own, spelled by the command
    assert _PARSER.parse_args(["-c=x.ini", "current"]).config == ["x.ini"]
    assert main.make_context("fencemigrate", ["-c=x.ini", "--raise", "current"]).params["config_files"] == ("x.ini",)


def test_a_short_option_value_after_equals() -> None:
    """`history -r=r_one:r_two` is `history -r r_one:r_two`, in Alembic's parser (the control) and here."""
    assert _COMMANDS["history"].parse_args(["-r=r_one:r_two"]).rev_range == "r_one:r_two"
    params = _fencemigrate_params("history", ["--verb", "-r=r_one:r_two", "--indicate"])
    assert (params["rev_range"], params["verbose"], params["indicate_current"]) == ("r_one:r_two", True, True)
    assert _fencemigrate_params("downgrade", ["-1", "--tok=5", "--sql"])["revision"] == "-1"


def test_an_ambiguous_abbreviation_is_bad_usage(tmp_path: Path) -> None:
    """`upgrade head --t 5`: --tag to Alembic, but here it could be --token, --tag or --ttl: exit 2,
    naming them, before anything connects."""
    result = run_in_process(tmp_path, "upgrade", "head", "--t", "5")
    assert result.code == 2, result
    assert "Error: ambiguous option: --t could match --token, --tag, --ttl" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == []

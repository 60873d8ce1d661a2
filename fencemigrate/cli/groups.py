"""The command line as Alembic's argparse reads it: ``downgrade -1 --token 5`` reads ``-1`` as the
revision, ``history --verb -r=a:b`` as ``history --verbose -r a:b``.

Alembic's argparse takes an argument that looks like a negative number (``-1``, ``-2``) for a
positional one, or for the value of the option before it (``--tag -1``); click would take it for
an unknown option. :class:`RevisionArgumentsCommand` follows argparse: such arguments stay
positional wherever they stand among the options, and every other argument is parsed by click
as usual (an unknown option is still click's "No such option" usage error).

argparse also takes a long option by any prefix that names exactly one of the command's long
options (``revision --autogen``, ``--raise`` before the command), and a short option's value after
``=`` (``-r=a:b``); :func:`argparse_spellings` rewrites both to click's spelling. A prefix of several
options is a usage error naming them, as argparse's "ambiguous option".

The click groups of the command line: each command's whole first sentence in the command list,
the exit statuses at the end of the top-level help, and usage errors click raises itself (unknown
option, missing argument, bad choice) as one JSON object when ``--json`` is on the command line.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from typing import IO, Any

import click

from ..errors import EXIT_STATUSES
from ..scrub import scrub_secrets

NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""argparse's own test (``ArgumentParser._negative_number_matcher``) for an argument starting
with "-" that is not an option: ``-1`` is, ``-1:`` is not (give ranges with ``--``, as to Alembic)."""


class RevisionArgumentsCommand(click.Command):
    """A click command that reads negative-number arguments as Alembic's argparse does."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        params = self.get_params(ctx)
        spelled = argparse_spellings(ctx, args, params)
        return super().parse_args(ctx, negative_numbers_as_arguments(spelled, value_options(params)))


class RevisionArgumentsGroup(click.Group):
    """A click group whose commands are :class:`RevisionArgumentsCommand` unless they say otherwise."""

    command_class = RevisionArgumentsCommand


def value_options(params: Sequence[click.Parameter]) -> set[str]:
    """The names of the options among ``params`` that take the next argument as their value."""
    return {
        name
        for param in params
        if isinstance(param, click.Option) and not param.is_flag and not param.count and param.nargs == 1
        for name in param.opts
    }


def argparse_spellings(
    ctx: click.Context, args: Sequence[str], params: Sequence[click.Parameter], until_command: bool = False
) -> list[str]:
    """``args`` with each long option given by a prefix spelled in full (``--autogen``:
    ``--autogenerate``) and each ``-X=value`` of a short option X taking a value split into ``-X value``.

    Options' values and everything after ``--`` stay as they are; with ``until_command`` (a group),
    so does everything from the first positional argument (the command and its own arguments) on.
    A prefix of several long options is click's usage error naming them (argparse's "ambiguous
    option"); a prefix of none is left for click to refuse as an unknown option.
    """
    longs = list(
        dict.fromkeys(
            name
            for param in params
            if isinstance(param, click.Option)
            for name in (*param.opts, *param.secondary_opts)
            if name.startswith("--")
        )
    )
    takes_value = value_options(params)
    spelled: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--" or len(arg) < 2 or not arg.startswith("-") or NEGATIVE_NUMBER.match(arg):
            spelled.append(arg)
            if arg == "--" or until_command:
                return spelled + rest
            continue
        option = _in_full(ctx, arg, longs, takes_value)
        spelled += option
        if len(option) == 1 and rest and _takes_next(option[0], takes_value):
            spelled.append(rest.pop(0))
    return spelled


def _in_full(ctx: click.Context, arg: str, longs: list[str], takes_value: set[str]) -> list[str]:
    """Option ``arg`` in click's spelling: one argument, or a short option and its value."""
    if not arg.startswith("--"):
        if arg[2:3] == "=" and arg[:2] in takes_value:
            return [arg[:2], arg[3:]]
        return [arg]
    name, equals, value = arg.partition("=")
    if name in longs or len(name) < 3:
        return [arg]
    matches = [option for option in longs if option.startswith(name)]
    if len(matches) > 1:
        raise click.UsageError(f"ambiguous option: {name} could match {', '.join(matches)}", ctx)
    return [matches[0] + equals + value] if matches else [arg]


def negative_numbers_as_arguments(args: Sequence[str], value_options: set[str]) -> list[str]:
    """``args`` with its positional negative numbers after a ``--``, behind every option.

    Options keep their order, and so do positional arguments; click takes options anywhere, so
    moving them all before the ``--`` changes nothing else. Unchanged without such numbers.
    """
    options: list[str] = []
    arguments: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            arguments += rest
            break
        if len(arg) < 2 or not arg.startswith("-") or NEGATIVE_NUMBER.match(arg):
            arguments.append(arg)
            continue
        options.append(arg)
        if rest and _takes_next(arg, value_options):
            options.append(rest.pop(0))
    if not any(NEGATIVE_NUMBER.match(arg) for arg in arguments):
        return list(args)
    return [*options, "--", *arguments]


def _takes_next(arg: str, value_options: set[str]) -> bool:
    """Whether option ``arg`` takes the argument after it as its value (``--tag``, ``-r``, ``-vr``)."""
    if arg in value_options:
        return True
    if arg.startswith("--") or "=" in arg:
        return False
    for index, letter in enumerate(arg[1:], start=1):
        if f"-{letter}" in value_options:
            return index == len(arg) - 1  # a short option's value may be glued to it: -r-3:
    return False


class CommandGroup(RevisionArgumentsGroup):
    """A group (whose commands read ``-1`` as a relative revision) whose command list shows each
    command's first sentence whole, wrapped to the terminal (click cuts it to about 45 characters)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class MainGroup(CommandGroup):
    """The top-level group: its help ends with the exit statuses; with ``--json`` anywhere on the
    command line, a usage error click raises is printed as ``{"status": "usage", ...}``. Its own
    options may be spelled as argparse takes them (``--raise``: :func:`argparse_spellings`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, argparse_spellings(ctx, args, self.get_params(ctx), until_command=True))

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Exit statuses"):
            formatter.write_dl(list(EXIT_STATUSES))

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        as_json = "--json" in args
        try:
            ctx = super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            raise (_in_json(error) if as_json else error) from None
        ctx.meta[_JSON_REQUESTED] = as_json
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise (_in_json(error) if ctx.meta.get(_JSON_REQUESTED) else error) from None


_JSON_REQUESTED = "fencemigrate.json"


class _JsonUsageError(click.UsageError):
    """A usage error shown as one JSON object on stdout (exit status 2, as click's own)."""

    def show(self, file: IO[Any] | None = None) -> None:
        message = scrub_secrets(self.format_message())
        click.echo(json.dumps({"message": message, "status": "usage"}, sort_keys=True))


def _in_json(error: click.UsageError) -> _JsonUsageError:
    return _JsonUsageError(error.format_message(), error.ctx)

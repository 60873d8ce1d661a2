"""Relative revisions on the command line: ``downgrade -1 --token 5`` reads ``-1`` as the revision.

Alembic's argparse takes an argument that looks like a negative number (``-1``, ``-2``) for a
positional one, or for the value of the option before it (``--tag -1``); click would take it for
an unknown option. :class:`RevisionArgumentsCommand` follows argparse: such arguments stay
positional wherever they stand among the options, and every other argument is parsed by click
as usual (an unknown option is still click's "No such option" usage error).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import click

NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""argparse's own test (``ArgumentParser._negative_number_matcher``) for an argument starting
with "-" that is not an option: ``-1`` is, ``-1:`` is not (give ranges with ``--``, as to Alembic)."""


class RevisionArgumentsCommand(click.Command):
    """A click command that reads negative-number arguments as Alembic's argparse does."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, negative_numbers_as_arguments(args, self._value_options(ctx)))

    def _value_options(self, ctx: click.Context) -> set[str]:
        """The names of this command's options that take the next argument as their value."""
        return {
            name
            for param in self.get_params(ctx)
            if isinstance(param, click.Option) and not param.is_flag and not param.count and param.nargs == 1
            for name in param.opts
        }


class RevisionArgumentsGroup(click.Group):
    """A click group whose commands are :class:`RevisionArgumentsCommand` unless they say otherwise."""

    command_class = RevisionArgumentsCommand


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

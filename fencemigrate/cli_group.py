"""The click groups of the command line: each command's whole first sentence in the command list,
the exit statuses at the end of the top-level help, and usage errors click raises itself (unknown
option, missing argument, bad choice) as one JSON object when ``--json`` is on the command line."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

import click

from .errors import EXIT_STATUSES
from .relative_revisions import RevisionArgumentsGroup, argparse_spellings
from .scrub import scrub_secrets


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

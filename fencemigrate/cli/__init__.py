"""The ``fencemigrate`` command line: each command is a few lines calling ``api``.

Exit statuses: 0 success, 1 error, 2 bad usage, 3 FENCED or lease lost, 4 lease busy, 5 dirty,
130 / 143 stopped by SIGINT / SIGTERM (rolled back, lease released).
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import sys
import traceback
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from alembic import __version__ as alembic_version
from alembic.config import Config

from .. import agent_server, api, examples
from ..config import FENCE_AWARE, config_error, format_duration, init_config, load_config
from ..dialects import MODES, PRECHECK
from ..dialects.waits import LockWait, lock_wait_text
from ..errors import ERROR, FencemigrateError, Interrupted, UsageError, render
from ..fence.guard import ALLOWED, UNGUARDED
from ..leases import Grant, LeaseStatus
from ..leases.model import DEFAULT_ACQUIRE_WAIT, DEFAULT_RUN_WAIT, DEFAULT_TTL
from ..process import Stopped, exit_process, stop_on_signals
from ..progress import SILENT, LeaseWait, Progress, StepStart
from ..runtime.outcome import DONE_BY_ANOTHER_RUNNER, NOTHING_TO_DO, WRITTEN_AS_SQL, RunOutcome
from ..runtime.request import RESOLVE_AS, listed
from ..scrub import json_text, scrub_secrets
from .groups import CommandGroup, MainGroup

if TYPE_CHECKING:  # what other commands print: imported by those commands only (api.py)
    from ..fence.ledger import AppliedSource
    from ..fence.state import State
    from ..runtime.listings import RevisionListing


class _Context:
    def __init__(
        self, config_files: tuple[str, ...], name: str, x_arguments: tuple[str, ...], raiseerr: bool, quiet: bool
    ) -> None:
        self.config_files, self.name, self.x_arguments = config_files, name, x_arguments
        self.raiseerr, self.quiet = raiseerr, quiet
        self.progress: Progress = SILENT if quiet else _StderrProgress()

    def config(self) -> Config:
        return self.with_options(load_config(self.config_files, self.name, self.x_arguments))

    def with_options(self, config: Config) -> Config:
        """``config`` with the global --raiseerr and -q in its ``cmd_opts``, as Alembic's: its own output
        (``Config.print_stdout``, "Generating ... done") is silent with quiet."""
        if config.cmd_opts is None:
            config.cmd_opts = argparse.Namespace()
        config.cmd_opts.raiseerr, config.cmd_opts.quiet = self.raiseerr, self.quiet
        return config


@click.group(cls=MainGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c",
    "--config",
    "config_files",
    multiple=True,
    metavar="FILE",
    help="Alembic config file (alembic.ini and/or pyproject.toml); default alembic.ini or $ALEMBIC_CONFIG.",
)
@click.option("-n", "--name", default="alembic", show_default=True, help="Section of the ini file to use.")
@click.option("-x", "x_arguments", multiple=True, metavar="KEY=VALUE", help="Extra argument for env.py, as alembic -x.")
@click.option(
    "--raiseerr",
    is_flag=True,
    help="Print the full stack trace of an error on stderr, after its message (exit status unchanged).",
)
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help=(
        "No progress on stderr and none of Alembic's own output; results and errors are still printed. "
        "Alembic's log lines (INFO ... Running upgrade) come from env.py's logging config and stay, as with alembic -q."
    ),
)
@click.version_option(
    package_name="fencemigrate",
    message=f"%(prog)s, version %(version)s (Alembic {alembic_version})",
    help="Show fencemigrate's version and the Alembic version it runs, and exit.",
)
@click.pass_context
def main(
    ctx: click.Context,
    config_files: tuple[str, ...],
    name: str,
    x_arguments: tuple[str, ...],
    raiseerr: bool,
    quiet: bool,
) -> None:
    """Fenced Alembic migrations: a stale lease holder can never apply, re-apply or roll back."""
    ctx.obj = _Context(config_files, name, x_arguments, raiseerr, quiet)


def run() -> NoReturn:
    """The console script: :func:`main`, then an exit without the interpreter's teardown.

    SIGTERM and SIGINT stop a run the orderly way (rolled back, lease released): exit 143 / 130.
    """
    stop_on_signals()
    try:
        main()
        status = 0
    except SystemExit as stop:
        status = _exit_status(stop.code)
    except Stopped as stop:  # outside a command's own handling (e.g. while printing)
        status = stop.exit_status
    exit_process(status)


def _exit_status(code: object) -> int:
    """``sys.exit``'s argument as an exit status: None is 0, a message is printed and is 1."""
    if code is None or isinstance(code, int):
        return code or 0
    click.echo(scrub_secrets(str(code)), err=True)
    return ERROR.exit_status


def _lease_options(wait_default: str) -> list[Callable[..., Any]]:
    return [
        click.option(
            "--ttl",
            metavar="DURATION",
            help=f"Lease time to live, by the lease service's clock (default {DEFAULT_TTL}); e.g. 30s, 5m.",
        ),
        click.option(
            "--wait",
            metavar="DURATION",
            help=f"How long to wait while another live holder has the lease, or another writer holds the "
            f"fence in the database, --token included (default {wait_default}).",
        ),
        click.option(
            "--preempt",
            is_flag=True,
            help="Cancel a stale in-flight migration (older token, expired lease) instead of waiting; "
            "with --token, one under an older token that holds the fence.",
        ),
        _lease_url_option,
    ]


_lease_url_option = click.option(
    "--lease-url",
    metavar="URL",
    help="Lease service: redis://HOST:PORT/DB (default: the built-in one in the migration database; "
    "config key fencemigrate_lease_url).",
)


def _comma_separated(value: str | None) -> tuple[str, ...] | None:
    """An option's ``A,B,...`` as its items (checked by the API: an empty item is bad usage)."""
    return None if value is None else tuple(value.split(","))


_writer_options = [
    click.option("--holder", metavar="NAME", help="Who is writing (default host:pid)."),
    click.option("--resource", metavar="NAME", help="Fenced resource (default db/migrations)."),
    click.option("--tag", metavar="TAG", help="Arbitrary tag for env.py, as alembic --tag."),
    click.option(
        "--mode",
        type=click.Choice(MODES),
        help="transactional: claim and DDL in one transaction; precheck: check the fence before "
        "each revision under a named lock, marking it dirty until it finishes "
        "(default: precheck on MySQL/MariaDB, transactional elsewhere).",
    ),
    click.option(
        "--expect-heads",
        metavar="REV[,REV...]",
        callback=lambda _ctx, _param, value: _comma_separated(value),
        help="Refuse (FENCED, exit 3) unless the database's heads are exactly these when the claim is "
        "taken: the heads you planned from (revision ids or unique prefixes; base: none applied).",
    ),
]


def _with_options(fn: Callable[..., Any], options: list[Callable[..., Any]]) -> Callable[..., Any]:
    for option in reversed(options):
        fn = option(fn)
    return fn


def _fence_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    return _with_options(
        fn,
        [
            click.option(
                "--token",
                envvar="FENCEMIGRATE_TOKEN",
                metavar="N",
                help="Your lease's fencing token (1..2**62); also $FENCEMIGRATE_TOKEN. "
                "Without it the run takes, renews and releases a lease itself.",
            ),
            *_writer_options,
            *_lease_options(wait_default=DEFAULT_RUN_WAIT),
            click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
        ],
    )


def _reapply_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A reapply takes no lease of its own, so it has no lease options (see ``reapply --help``)."""
    return _with_options(
        fn,
        [
            click.option(
                "--token",
                envvar="FENCEMIGRATE_TOKEN",
                metavar="N",
                help="The token that applied REVISION (required; also $FENCEMIGRATE_TOKEN).",
            ),
            *_writer_options,
            click.option(
                "--wait",
                metavar="DURATION",
                help="How long to wait while another writer holds the fence in the database (pre-check mode: "
                f"the resource's named lock), in reported slices (default {DEFAULT_RUN_WAIT}).",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
        ],
    )


_sql_option = click.option(
    "--sql",
    is_flag=True,
    help="Write the SQL (with the fence claims) instead of running it; without --token the script takes its own "
    "lease from the database's lease service when it runs (--ttl, --wait) and refuses unless the heads are the "
    "ones it was written from (PostgreSQL, SQLite, MySQL/MariaDB).",
)


@main.command()
@click.argument("revision")
@_fence_options
@_sql_option
@click.pass_obj
def upgrade(obj: _Context, /, revision: str, as_json: bool, token: str | None, **options: Any) -> None:
    """Upgrade to REVISION, claiming the fence before every step."""
    _run(as_json, lambda: api.upgrade(obj.config(), revision, token=token, progress=obj.progress, **options))


@main.command()
@click.argument("revision")
@_fence_options
@_sql_option
@click.pass_obj
def downgrade(obj: _Context, /, revision: str, as_json: bool, token: str | None, **options: Any) -> None:
    """Downgrade to REVISION, claiming the fence before every step.

    A revision whose file changed since it was applied is rolled back with the downgrade() of the
    text it was applied from, as the ledger recorded it (the output says so); where the ledger has
    no text of it, nothing runs (exit 1). With --sql, the script checks when it runs that the
    database applied the file whose downgrade() it holds.
    """
    _run(as_json, lambda: api.downgrade(obj.config(), revision, token=token, progress=obj.progress, **options))


@main.command()
@click.argument("revision")
@_reapply_options
@click.pass_obj
def reapply(obj: _Context, /, revision: str, as_json: bool, token: str | None, **options: Any) -> None:
    """Roll back REVISION and apply it again in one transaction; only under the token that applied it.

    --token is required: the ledger lets only the token that applied a revision re-apply it, and a
    lease taken now would bring a new token, which could never re-apply anything. So a reapply
    takes no lease of its own (no --ttl, --preempt or --lease-url): it writes under the token it
    applied the revision with.

    A REVISION whose file changed since it was applied is rolled back with the downgrade() of the
    text it was applied from, then applied from the file, as downgrade does.
    """
    _run(as_json, lambda: api.reapply(obj.config(), revision, token=token, progress=obj.progress, **options))


@main.command()
@click.argument("revisions", nargs=-1, required=True)
@_fence_options
@_sql_option
@click.option(
    "--purge", is_flag=True, help="Empty the version table (and its ledger) before stamping, under the fence."
)
@click.pass_obj
def stamp(obj: _Context, /, revisions: tuple[str, ...], as_json: bool, token: str | None, **options: Any) -> None:
    """Set the version table to REVISIONS without running migrations, under the fence."""
    _run(as_json, lambda: api.stamp(obj.config(), revisions, token=token, progress=obj.progress, **options))


@main.command()
@click.argument("revision")
@click.option("--token", envvar="FENCEMIGRATE_TOKEN", metavar="N", help="Your lease's fencing token (required).")
@click.option(
    "--as",
    "resolved_as",
    type=click.Choice(RESOLVE_AS),
    required=True,
    help="applied: the revision's DDL is all in; rolled-back: none of it is left.",
)
@click.option("--holder", metavar="NAME", help="Who is resolving (default host:pid).")
@click.option("--resource", metavar="NAME", help="Fenced resource (default db/migrations).")
@click.option("--wait", metavar="DURATION", help=f"How long to wait for the named lock (default {DEFAULT_RUN_WAIT}).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_obj
def resolve(obj: _Context, /, revision: str, as_json: bool, token: str | None, **options: Any) -> None:
    """Settle a dirty REVISION (pre-check mode) as applied or rolled back, after checking the schema."""
    result = _guarded(as_json, lambda: api.resolve(obj.config(), revision, token=token, **options))
    if as_json:
        _print_json(result.as_json())
    else:
        click.echo(
            f"resolved {result.revision} as {result.resolved_as} on {result.resource} under token {result.token} "
            f"(its {result.was} under token {result.started_token} had not finished)\n"
            f"  heads now: {', '.join(result.heads) or '(none)'}"
        )


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_obj
def state(obj: _Context, as_json: bool) -> None:
    """Show heads, fence tokens and the ledger: read this before you re-plan."""
    result = _guarded(as_json, lambda: api.state(obj.config()))
    if as_json:
        _print_json(result.as_json())
    else:
        click.echo(_state_text(result))


@main.command()
@click.option("--resource", metavar="NAME", help="Only this resource's events (default: every resource).")
@click.option(
    "--since",
    metavar="WHEN",
    help="From a date-time (ISO 8601, UTC unless it has an offset) or from how long ago (10m, 2h).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_obj
def timeline(obj: _Context, /, as_json: bool, **options: Any) -> None:
    """Every grant, renewal, expiry, apply, rollback and FENCED rejection, oldest first."""
    events = _guarded(as_json, lambda: api.timeline(obj.config(), **options))
    if as_json:
        _print_json({"status": "ok", "events": [event.as_json() for event in events]})
    else:
        from ..fence.timeline import timeline_lines

        click.echo("\n".join(timeline_lines(events, filtered=any(v is not None for v in options.values()))))


class _RulesEpilogCommand(click.Command):
    """``check --help`` ends with the rules, loaded only when help is shown."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from ..lint.formatters import rules_help

        self.epilog = rules_help()
        super().format_epilog(ctx, formatter)


@main.command(cls=_RulesEpilogCommand)
@click.option(
    "--db/--no-db",
    default=True,
    help="--db (the default): also compare with the database, through env.py: pending revisions, "
    "checksum drift, revisions missing here, the fence schema, and the models (target_metadata) as "
    "`alembic check` does; a database env.py cannot read fails the check. --no-db: the revision files alone.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--format",
    "output",
    type=click.Choice(["text", "github"]),
    default="text",
    show_default=True,
    help="text: a table; github: workflow annotations (::error file=...,line=...::message).",
)
@click.option("--select", metavar="RULES", help="Only these rules: ids or names, comma-separated.")
@click.option("--ignore", metavar="RULES", help="Leave these rules out: ids or names, comma-separated.")
@click.pass_obj
def check(obj: _Context, /, db: bool, as_json: bool, output: str, **rules: str | None) -> None:
    """Lint the migrations and the database for what breaks fencing or the next deploy, and compare
    the models with the database as alembic check does (--no-db: the revision files alone)."""
    if as_json and output == "github":
        _fail(True, UsageError("--json and --format github exclude each other"))
    from ..lint.formatters import github_report, text_report

    report = _guarded(as_json, lambda: api.check(obj.config(), db=db, **rules))
    if as_json:
        _print_json(report.as_json())
    else:
        click.echo(github_report(report) if output == "github" else text_report(report))
    sys.exit(report.exit_status)


@main.group(cls=CommandGroup)
def lease() -> None:
    """Leases that issue fencing tokens: acquire, renew, release, status, detach."""


_resource_option = click.option("--resource", metavar="NAME", help="Leased resource (default db/migrations).")
_holder_option = click.option("--holder", metavar="NAME", help="Who holds the lease (required).")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
_grant_token_option = click.option(
    "--token", metavar="N", help="The grant's token (default: the holder's current grant)."
)


@lease.command("acquire")
@_resource_option
@_holder_option
@click.option("--ttl", metavar="DURATION", help=f"Time to live, by the lease service's clock (default {DEFAULT_TTL}).")
@click.option(
    "--wait",
    metavar="DURATION",
    help=f"How long to wait while another live holder has it (default {DEFAULT_ACQUIRE_WAIT}).",
)
@click.option(
    "--preempt", is_flag=True, help="Cancel a stale in-flight migration (older token) instead of waiting for it."
)
@_lease_url_option
@_json_option
@click.pass_obj
def lease_acquire(obj: _Context, /, as_json: bool, **options: Any) -> None:
    """Grant the lease with a new token (fencing every older holder) and read the state afresh."""
    grant, fresh = _guarded(as_json, lambda: api.lease_acquire(obj.config(), progress=obj.progress, **options))
    if as_json:
        _print_json({"status": "ok", "lease": grant.as_json(), "state": fresh.as_json()})
    else:
        click.echo(_grant_text("granted", grant) + "\n" + _state_text(fresh))


@lease.command("renew")
@_resource_option
@_holder_option
@_grant_token_option
@click.option(
    "--ttl",
    metavar="DURATION",
    help="New time to live from now (default: the lease's own TTL, as granted or last renewed).",
)
@_lease_url_option
@_json_option
@click.pass_obj
def lease_renew(obj: _Context, /, as_json: bool, **options: Any) -> None:
    """Extend your lease; exit 3 if someone else has been granted it since."""
    grant = _guarded(as_json, lambda: api.lease_renew(obj.config(), **options))
    if as_json:
        _print_json({"status": "ok", "lease": grant.as_json()})
    else:
        click.echo(_grant_text("renewed", grant))


@lease.command("release")
@_resource_option
@_holder_option
@_grant_token_option
@_lease_url_option
@_json_option
@click.pass_obj
def lease_release(obj: _Context, /, as_json: bool, **options: Any) -> None:
    """Free your lease; exit 3 if it is no longer yours."""
    status = _guarded(as_json, lambda: api.lease_release(obj.config(), **options))
    if as_json:
        _print_json({"status": "ok", "lease": status.as_json()})
    else:
        click.echo(f"released {status.resource} (last token issued: {status.token})")


@lease.command("status")
@_resource_option
@_lease_url_option
@_json_option
@click.pass_obj
def lease_status(obj: _Context, /, as_json: bool, **options: Any) -> None:
    """Show who holds the lease, its token and when it expires (by the service's clock)."""
    status = _guarded(as_json, lambda: api.lease_status(obj.config(), **options))
    if as_json:
        _print_json({"status": "ok", "lease": status.as_json()})
    else:
        click.echo(_status_text(status))


@lease.command("detach")
@_resource_option
@_lease_url_option
@_json_option
@click.pass_obj
def lease_detach(obj: _Context, /, as_json: bool, **options: Any) -> None:
    """Let the resource take external tokens (--token) again; refused while a lease is live."""
    status = _guarded(as_json, lambda: api.lease_detach(obj.config(), **options))
    if as_json:
        _print_json(
            {"status": "ok", "resource": status.resource, "token_source": "external", "fence_token": status.fence_token}
        )
    else:
        click.echo(
            f"{status.resource} now takes external tokens (--token) above its fence token {status.fence_token}; "
            "the next grant gives it back to a lease service"
        )


@main.command()
@click.option(
    "--sql",
    is_flag=True,
    help="Print the install script instead of running it: for the database "
    "sqlalchemy.url names (SQLite, MySQL/MariaDB; PostgreSQL otherwise).",
)
@click.option(
    "--grant-to",
    metavar="ROLE",
    help="PostgreSQL: the role that runs migrations, granted what fencemigrate "
    "needs in the fence schema, which stays owned by you (README: Two roles).",
)
@click.option(
    "--allow-tokenless-writes",
    "tokenless_writes",
    flag_value="allow",
    default=None,
    help="Opt out: let plain alembic (no fencing token) write the version table again; recorded, "
    "so no fenced run puts the guard back.",
)
@click.option(
    "--forbid-tokenless-writes",
    "tokenless_writes",
    flag_value="forbid",
    help="Opt back in: the database refuses version-table writes without a fencing token.",
)
@_json_option
@click.pass_obj
def install(obj: _Context, sql: bool, grant_to: str | None, tokenless_writes: str | None, as_json: bool) -> None:
    """Install the fence schema (done automatically on the first fenced run), put back its guard and
    guard the version table."""
    outcome = _guarded(
        as_json, lambda: api.install(obj.config(), sql=sql, grant_to=grant_to, tokenless_writes=tokenless_writes)
    )
    if sql:
        click.echo(outcome.text())
    if as_json:
        _print_json(outcome.as_json(), err=sql)
    elif not sql:
        click.echo(outcome.text())


@main.command()
@click.argument("directory")
@click.option(
    "-t",
    "--template",
    default=FENCE_AWARE,
    show_default=True,
    metavar="NAME",
    help="fencemigrate (fence-aware env.py) or one of Alembic's templates: see list_templates.",
)
@click.option("--package", is_flag=True, help="Write empty __init__.py files to the environment and versions/.")
@_json_option
@click.pass_obj
def init(obj: _Context, directory: str, template: str, package: bool, as_json: bool) -> None:
    """Create a new Alembic environment in DIRECTORY, by default one whose env.py is fence-aware.

    Writes files only: no token, no lease.
    """
    config = _guarded(as_json, lambda: obj.with_options(init_config(obj.config_files, obj.name)))
    outcome = _authoring(as_json, lambda: api.init(config, directory, template=template, package=package))
    if as_json:
        _print_json(outcome.as_json())
        return
    kept = outcome.kept
    if kept is not None:
        url = "no sqlalchemy.url" if kept.url is None else f"sqlalchemy.url {kept.url}"
        where = "no script_location" if kept.script_location is None else f"script_location {kept.script_location}"
        elsewhere = "" if kept.runs_directory else f" (point script_location at {directory} to run this environment)"
        click.echo(
            f"{outcome.config_file} already existed and was kept as it was: it still has {url} and {where}{elsewhere}"
        )
    if outcome.fence_aware:
        url_note = "; it migrates a SQLite file beside alembic.ini until you change sqlalchemy.url there"
        if kept is not None:
            url_note = ""
        click.echo(f"fence-aware Alembic environment written to {directory}{url_note}")
    else:
        edit = "" if kept is not None else "; edit sqlalchemy.url in alembic.ini"
        click.echo(
            f"Alembic environment (template {template}) written to {directory}{edit}; "
            "its env.py is not fence-aware: plain alembic runs it without a token"
        )


@main.command()
@click.option("--holder", metavar="NAME", help="Who the server's lease is granted to (default host:pid).")
@click.option("--resource", metavar="NAME", help="Fenced resource (default db/migrations).")
@click.option(
    "--ttl", metavar="DURATION", help=f"Time to live of the server's lease (default {DEFAULT_TTL}); e.g. 30s, 5m."
)
@click.option(
    "--branch",
    "branches",
    multiple=True,
    metavar="BRANCH",
    help="A branch push_branch may push: its SHA on the remote is recorded at each grant (repeatable).",
)
@click.option("--remote", default="origin", show_default=True, help="The git remote push_branch pushes to.")
@click.option(
    "--read-secret-files",
    is_flag=True,
    help="Let read_file read .env files and a config file with credentials (their secrets still shown as ***).",
)
@click.option(
    "--print-rules", is_flag=True, help="Print the ownership rule for an agent's system prompt, serve nothing."
)
@click.option(
    "--json", "as_json", is_flag=True, help="With --print-rules, print one JSON object; errors before serving too."
)
@click.pass_obj
def mcp(obj: _Context, /, as_json: bool, **options: Any) -> None:
    """Serve MCP over stdio for a coding agent: the lease token stays in the server (docs/mcp.md).

    Tools: read_state, acquire_lease, renew_lease, release_lease, upgrade, downgrade, reapply,
    stamp, check, push_branch, read_file, write_file; resource fencemigrate://state/RESOURCE.
    Needs pip install 'fencemigrate[mcp]'.
    """
    rules = _guarded(as_json, lambda: agent_server.mcp(obj.config(), **options))
    if rules is not None and as_json:
        _print_json({"status": "ok", "rules": rules})
    elif rules is not None:
        click.echo(rules, nl=False)


@main.command()
@click.option(
    "--url",
    metavar="URL",
    help="Replay on this PostgreSQL server (postgresql+psycopg://...; two scratch databases are made "
    "and dropped) instead of fresh SQLite files.",
)
@_json_option
def demo(url: str | None, as_json: bool) -> None:
    """Replay the incident from the design notes: fenced, then with plain alembic as the control."""
    result = _guarded(as_json, lambda: examples.demo(url, partial(click.echo, err=as_json)))  # --json: story on stderr
    verdict = "fencing kept agent-B's work; plain alembic destroyed it" if result.ok else "UNEXPECTED outcome"
    if as_json:
        _print_json(
            {
                "status": "ok" if result.ok else "error",
                "fenced_kept_b": result.fenced_kept_b,
                "control_lost_b": result.control_lost_b,
                "verdict": verdict,
            }
        )
    else:
        click.echo(f"\nverdict: {verdict}")
    sys.exit(0 if result.ok else ERROR.exit_status)


@main.command()
@click.option(
    "-c",
    "--check-heads",
    is_flag=True,
    help="Fail (exit 1) unless the database is on all head revisions, as Alembic's.",
)
@click.option("-v", "--verbose", is_flag=True, help="Use more verbose output.")
@_json_option
@click.pass_obj
def current(obj: _Context, /, as_json: bool, **options: bool) -> None:
    """As alembic current: the database's revisions (read only; --json: one JSON object)."""
    _listed(as_json, lambda: api.current(obj.config(), as_json=as_json, **options))


@main.command()
@click.option("-v", "--verbose", is_flag=True, help="Use more verbose output.")
@click.option("--resolve-dependencies", is_flag=True, help="Treat dependency versions as down revisions.")
@_json_option
@click.pass_obj
def heads(obj: _Context, /, as_json: bool, **options: bool) -> None:
    """As alembic heads: the head revisions of the revision files (--json: one JSON object)."""
    _listed(as_json, lambda: api.heads(obj.config(), as_json=as_json, **options))


@main.command()
@click.option("-r", "--rev-range", metavar="RANGE", help="A revision range: [start]:[end], [start]: or :[end].")
@click.option("-v", "--verbose", is_flag=True, help="Use more verbose output.")
@click.option("-i", "--indicate-current", is_flag=True, help="Indicate the database's current revisions.")
@_json_option
@click.pass_obj
def history(obj: _Context, /, as_json: bool, **options: Any) -> None:
    """As alembic history: the revisions, newest first (--json: one JSON object)."""
    _listed(as_json, lambda: api.history(obj.config(), as_json=as_json, **options))


@main.command()
@click.argument("rev")
@click.option(
    "--applied",
    is_flag=True,
    help="What the database applied as REV instead: the text of its file as applied, byte for byte on "
    "stdout (its token, holder and time on stderr); read only.",
)
@_json_option
@click.pass_obj
def show(obj: _Context, /, rev: str, applied: bool, as_json: bool) -> None:
    """As alembic show: the revisions REV names ("current": the database's; --json: one JSON object)."""
    if not applied:
        _listed(as_json, lambda: api.show(obj.config(), rev, as_json=as_json))
        return
    found: AppliedSource = _guarded(as_json, lambda: api.show(obj.config(), rev, applied=True))
    if as_json:
        _print_json(found.as_json())
        return
    click.echo(_applied_header(found), err=True)
    if found.source is not None:
        sys.stdout.flush()
        sys.stdout.buffer.write(found.source.encode("utf-8"))  # as it was, no newline added
        sys.stdout.buffer.flush()


@main.command()
@click.option("-m", "--message", metavar="TEXT", help="Message string of the new revision.")
@click.option(
    "--autogenerate",
    is_flag=True,
    help="Fill the revision with the operations that turn the database "
    "into env.py's target_metadata (read through env.py, as alembic does; nothing is written to it).",
)
@click.option(
    "--sql", is_flag=True, help="Run env.py in offline mode (needs revision_environment; not with --autogenerate)."
)
@click.option(
    "--head",
    default="head",
    show_default=True,
    metavar="REV",
    help="Head revision (or BRANCH@head) to base the new revision on.",
)
@click.option("--splice", is_flag=True, help="Allow a non-head revision as --head: the new revision starts a branch.")
@click.option("--branch-label", metavar="LABEL", help="Branch label of the new revision.")
@click.option("--version-path", metavar="PATH", help="Which of the configured version locations gets the file.")
@click.option("--rev-id", metavar="ID", help="Revision id to use instead of a generated one (must be new).")
@click.option("--depends-on", multiple=True, metavar="REV", help="A revision the new one depends on (repeatable).")
@_json_option
@click.pass_obj
def revision(obj: _Context, /, as_json: bool, depends_on: tuple[str, ...], **options: Any) -> None:
    """Create a new revision file, as alembic revision.

    Writes files only, so, as with alembic, it takes no token and no lease: a revision reaches the
    database only through upgrade, which is fenced. With --autogenerate env.py reads the database
    (a fence-aware env.py too, without -x fence_token) and nothing is written to it.
    """
    written = _authoring(
        as_json,
        lambda: api.revision(obj.config(), depends_on=depends_on or None, **options),
        stdout_owned=options["sql"],
    )
    if as_json:
        _print_json({"status": "ok", "revisions": [one.as_json() for one in written]}, err=options["sql"])


@main.command()
@click.argument("revisions", nargs=-1, required=True)
@click.option("-m", "--message", metavar="TEXT", help="Message string of the merge revision.")
@click.option("--branch-label", metavar="LABEL", help="Branch label of the merge revision.")
@click.option("--rev-id", metavar="ID", help="Revision id to use instead of a generated one (must be new).")
@click.option("--splice", is_flag=True, help="Allow merging revisions that are not heads.")
@_json_option
@click.pass_obj
def merge(obj: _Context, /, as_json: bool, revisions: tuple[str, ...], **options: Any) -> None:
    """Create a revision merging two or more REVISIONS ('heads' for all heads), as alembic merge.

    Writes files only, so, as with alembic, it takes no token and no lease. Unlike alembic, a merge
    of fewer than two revisions is refused (exit 2): alembic writes an ordinary revision then.
    """
    written = _authoring(as_json, lambda: api.merge(obj.config(), revisions, **options))
    if as_json:
        _print_json({"status": "ok", "revision": written.as_json()})


@main.command()
@click.option("-v", "--verbose", is_flag=True, help="Show each revision's details.")
@_json_option
@click.pass_obj
def branches(obj: _Context, /, as_json: bool, verbose: bool) -> None:
    """Show the branch points of the revision graph, as alembic branches."""
    points = _guarded(as_json, lambda: api.branches(obj.config(), verbose=verbose))
    if as_json:
        _print_json({"status": "ok", "branch_points": [point.as_json() for point in points]})
    for point in [] if as_json else points:
        click.echo(point.text)


@main.command()
@click.argument("rev")
@_json_option
@click.pass_obj
def edit(obj: _Context, /, as_json: bool, rev: str) -> None:
    """Open REV's file in $EDITOR ('current': the database's), as alembic edit.

    Writes files only (the editor does), so, as with alembic, it takes no token and no lease.
    """
    paths = _authoring(as_json, lambda: api.edit(obj.config(), rev))
    if as_json:
        _print_json({"status": "ok", "edited": paths})


@main.command("ensure_version")
@click.option("--sql", is_flag=True, help="Write the CREATE TABLE instead of running it.")
@_json_option
@click.pass_obj
def ensure_version(obj: _Context, /, as_json: bool, sql: bool) -> None:
    """Create Alembic's version table, empty, if it is missing, as alembic ensure_version.

    It changes no version, so it takes no token and no lease; on a fenced database the new table is
    guarded in the same transaction, exactly as fencemigrate install leaves one.
    """
    outcome = _authoring(as_json, lambda: api.ensure_version(obj.config(), sql=sql), stdout_owned=sql)
    if as_json:
        _print_json(outcome.as_json(), err=sql)
    elif not sql:
        click.echo(outcome.text())


@main.command("list_templates")
@_json_option
@click.pass_obj
def list_templates(obj: _Context, /, as_json: bool) -> None:
    """List the templates init can write: fencemigrate's fence-aware one and Alembic's."""
    templates = _guarded(as_json, api.list_templates)
    if as_json:
        _print_json({"status": "ok", "templates": [template.as_json() for template in templates]})
        return
    if obj.quiet:  # as alembic -q list_templates, whose list goes through Config.print_stdout
        return
    click.echo("Available templates:\n")
    for template in templates:
        note = " (fence-aware; the default)" if template.fence_aware else ""
        click.echo(f"{template.name} - {template.synopsis}{note}")
    click.echo("\nTemplates are used via the 'init' command, e.g.:")
    click.echo("\n  fencemigrate init --template generic ./scripts")


# -- output ------------------------------------------------------------------------------------


def _run(as_json: bool, call: Callable[[], RunOutcome]) -> None:
    outcome = _guarded(as_json, call)
    # With --sql the script owns stdout, so the summary (text or JSON) goes to stderr.
    if as_json:
        _print_json(outcome.as_json(), err=outcome.offline)
    else:
        click.echo(scrub_secrets(_outcome_text(outcome)), err=outcome.offline)


def _listed(as_json: bool, call: Callable[[], RevisionListing | None]) -> None:
    """Alembic has printed the text; print the JSON of ``--json``."""
    listing = _guarded(as_json, call)
    if listing is not None:
        _print_json(listing.as_json())


_T = TypeVar("_T")


def _authoring(as_json: bool, call: Callable[[], _T], stdout_owned: bool = False) -> _T:
    """``_guarded``; with --json, Alembic's own lines ("Generating ... done") go to stderr, since
    stdout is the JSON object's (unless --sql's script owns it)."""

    def quietly() -> _T:
        with contextlib.redirect_stdout(sys.stderr) if as_json and not stdout_owned else contextlib.nullcontext():
            return call()

    return _guarded(as_json, quietly)  # type: ignore[no-any-return]


def _guarded(as_json: bool, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except FencemigrateError as error:
        _fail(as_json, error)
    except Stopped as stop:
        _fail(as_json, Interrupted(stop.signal_name, stop.exit_status), stop)
    except configparser.Error as error:
        _fail(as_json, config_error(error), error)
    except Exception as error:  # an error of Alembic's or fencemigrate's own outside env.py and the revisions
        _fail(as_json, FencemigrateError(f"{type(error).__name__}: {scrub_secrets(str(error)).strip()}"), error)


def _fail(as_json: bool, error: FencemigrateError, raised: BaseException | None = None) -> NoReturn:
    """Print ``error`` (one line, or the JSON object) and exit with its status; with --raiseerr, then
    the stack trace of what was ``raised`` (default: ``error``) on stderr, as Alembic's --raiseerr shows it."""
    shown = render(error, as_json)
    click.echo(shown.text, err=shown.to_stderr)
    context = click.get_current_context(silent=True)
    options = context.find_object(_Context) if context is not None else None
    if options is not None and options.raiseerr:
        trace = _traceback_text(raised or error)
        if trace:
            click.echo(scrub_secrets(trace), err=True, nl=False)
    sys.exit(shown.exit_status)


def _traceback_text(raised: BaseException) -> str:
    """The full stack trace of ``raised``, with the error it was translated from (even one raised
    ``from None``); empty when it was never raised."""
    if raised.__traceback__ is None:
        return ""
    raised.__suppress_context__ = False
    return "".join(traceback.format_exception(raised))


class _StderrProgress:
    """The CLI's :class:`~fencemigrate.progress.Progress`: one line on stderr per report."""

    def waiting_for_lease(self, wait: LeaseWait) -> None:
        lease = wait.lease
        if lease.live_holder is None:
            who = "another grant of it is in progress"
        elif lease.token == 0:  # Redis, while the grant to them is being made
            who = f"being granted to {lease.holder}"
        else:
            who = f"held by {lease.holder} with token {lease.token}"
        until = (
            ""
            if lease.expires_at is None
            else (f" until {lease.expires_at.isoformat(timespec='seconds')} by the lease service's clock")
        )
        click.echo(
            scrub_secrets(
                f"waiting for the lease on {lease.resource}: {who}{until}; "
                f"waiting at most {_seconds(wait.remaining_ms)} more"
            ),
            err=True,
        )

    def waiting_for_lock(self, wait: LockWait) -> None:
        click.echo(scrub_secrets(lock_wait_text(wait)), err=True)

    def step_started(self, step: StepStart) -> None:
        revisions = ", ".join(step.revisions) or "(version table only)"
        click.echo(f"{step.action} {revisions} ({step.position}/{step.total}) under token {step.token}", err=True)


def _seconds(milliseconds: int) -> str:
    """A wait left, in whole seconds (rounded up): ``7s``, ``9m05s``."""
    seconds = -(-milliseconds // 1000)
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m{seconds % 60:02d}s"


def _print_json(payload: dict[str, Any], err: bool = False) -> None:
    click.echo(json_text(payload), err=err)


def _applied_header(found: AppliedSource) -> str:
    """Who applied the revision ``show --applied`` prints, and when (on stderr: stdout is the file's text)."""
    if found.method == "adopt":
        how = f"applied before fencing, adopted with no token by {found.holder} at {found.applied_at}"
    else:
        how = f"{'stamped' if found.method == 'stamp' else 'applied'} under token {found.token} by {found.holder} "
        how += f"at {found.applied_at}"
    line = (
        f"{found.revision} {how} "
        f"(resource {found.resource}, version table {found.version_table}"
        + (f", sha256 {found.script_sha256[:12]}" if found.script_sha256 else "")
        + ")"
    )
    if found.state != "applied":
        line += f"; dirty: its DDL started ({found.state}) and never finished"
    if found.source is None:
        from ..fence.ledger import NOT_RECORDED

        line += (
            f"\n{NOT_RECORDED}: the row was written before the fence schema kept the text of revision files "
            "(or the file was not UTF-8 text)"
        )
    return line


def _outcome_text(outcome: RunOutcome) -> str:
    script_lease = outcome.script_lease
    token = "(none)" if outcome.token is None else outcome.token
    lines = [
        f"{outcome.command} {WRITTEN_AS_SQL if outcome.offline else 'done'}: resource {outcome.resource}, "
        f"token {'granted when the script runs' if script_lease else token}, holder {outcome.holder}"
    ]
    if script_lease:
        lines.append(
            f"  the script takes its own lease from the database's lease service when it runs (TTL "
            f"{format_duration(script_lease.ttl_ms)}, waiting at most {format_duration(script_lease.wait_ms)}) and "
            f"refuses unless the heads are {listed(outcome.script_heads or ())}"
        )
    if outcome.no_lease == NOTHING_TO_DO:
        lines.append("  no lease taken: there was nothing to do")
    elif outcome.no_lease == DONE_BY_ANOTHER_RUNNER:
        lines.append("  no lease taken: another runner finished the work while this one waited for the lease")
    if outcome.leased:
        lines.append(_lease_line(outcome))
    if outcome.mode == PRECHECK and outcome.steps and outcome.offline:
        lines.append(
            "  pre-check mode: the script checks the fence before each revision under the resource's named lock, "
            "marks each revision before its DDL and settles it after (an unfinished one stays dirty)"
        )
    elif outcome.mode == PRECHECK and outcome.steps:
        lines.append(
            "  pre-check mode: the fence was checked before each revision under the resource's named lock; "
            "each revision was marked before its DDL and settled after it (an unfinished one stays dirty)"
        )
    if outcome.installed_fence_schema:
        lines.append("  installed the fence schema")
    if outcome.adopted is not None:
        lines.extend(f"  {line}" for line in outcome.adopted.lines())
    if outcome.forced_single_transaction:
        lines.append("  ran in one transaction (overriding transaction_per_migration=True in env.py)")
    for step in outcome.steps:
        names = ", ".join(step.revisions) or "(version table only)"
        action = step.action(outcome.command, offline=False)
        if outcome.offline:  # nothing ran: the script does it when it is run
            under = "the token the script is granted" if step.token is None else f"token {step.token}"
            lines.append(f"  {names} {WRITTEN_AS_SQL}, to be {action} under {under}")
        else:
            lines.append(f"  {action} {names} under token {step.token}")
        if step.applied_text is not None:
            lines.append(f"    {step.applied_text.described()}")
        if not step.atomic and outcome.mode != PRECHECK:
            lines.append(
                "    WARNING: this revision ran outside a single transaction (autocommit block or COMMIT): "
                "the fence was claimed before it and re-claimed and verified after it"
            )
    if not outcome.steps:
        lines.append("  nothing to do")
    if outcome.heads is not None:
        when = "after the script" if outcome.offline else "now"  # --sql applied nothing yet
        lines.append(f"  heads {when}: {', '.join(outcome.heads) or '(none)'}")
    return "\n".join(lines)


def _lease_line(outcome: RunOutcome) -> str:
    """Where the run's token came from: the lease it took, how often it renewed it, and whether
    it was released."""
    count = outcome.lease_renewals
    renewed = "" if not count else f", renewed {count} time{'s' if count > 1 else ''} while it worked"
    if outcome.lease_note is None:
        return f"  the token came from a lease this run took{renewed} and released"
    return f"  the token came from a lease this run took{renewed}; it was not released: {outcome.lease_note}"


def _grant_text(verb: str, grant: Grant) -> str:
    lease = grant.lease
    ttl = format_duration(lease.ttl_ms) if lease.ttl_ms else "?"
    expires = lease.expires_at.isoformat() if lease.expires_at else "?"
    lines = [f"{verb} {lease.resource} to {lease.holder}: token {lease.token}, ttl {ttl}, expires {expires}"]
    if grant.previous_holder:
        lines.append(f"  the lease of {grant.previous_holder} had expired; it is fenced from now on")
    lines += [f"  cancelled the stale in-flight migration of backend {pid}" for pid in grant.preempted]
    if grant.renewed_after_expiry:
        lines.append("  the lease had expired, but nobody else was granted it since: renewed")
    if grant.new_epoch:
        lines.append(
            "  new epoch: the database (or Redis) is not the one the last grant ran on (a failover, a "
            "restore or a restart may have lost grants); this token is above every token they issued"
        )
    if lease.replication is not None:
        lines.append(f"  {_REPLICATION[lease.replication]}")
    lines.append(f"  write with: --token {lease.token}   (or FENCEMIGRATE_TOKEN={lease.token})")
    return "\n".join(lines)


_REPLICATION = {
    "synchronous": "grant confirmed by a synchronous standby",
    "asynchronous": "grant not confirmed by a standby (no synchronous standby): a failover may lose it, and "
    "the next grant after one starts a new epoch",
}


_LAST_GRANT = {
    "synchronous": "last grant confirmed by a synchronous standby",
    "asynchronous": "last grant not confirmed by a standby",
}


def _status_text(status: LeaseStatus) -> str:
    fence = "none yet" if status.fence_token is None else str(status.fence_token)
    if status.holder is None:
        head = f"{status.resource}: free"
    else:
        expiry = status.expires_at.isoformat() if status.expires_at else "?"
        state = "EXPIRED at" if status.expired else "until"
        head = f"{status.resource}: held by {status.holder}, token {status.token}, {state} {expiry}"
    lines = [head, f"  last token issued: {status.token}; fence token: {fence}"]
    if status.implausible:
        granted = status.granted_at.isoformat() if status.granted_at else "?"
        lines.append(
            f"  implausible: granted at {granted}, further in the future than its TTL by the lease service's "
            "clock (a clock ahead when it was granted, or stepped back since): treated as expired; the next "
            "grant takes it over"
        )
    if status.holder is not None and status.replication is not None:
        lines.append(f"  {_REPLICATION[status.replication]}")
    return "\n".join(lines)


def _state_text(result: State) -> str:
    lines = [f"heads: {', '.join(result.heads) or '(none)'}"]
    if result.fence_schema_version is None:
        lines.append("fence schema: not installed (no fenced run has written here yet)")
        return "\n".join(lines)
    lines.append(f"fence schema: {result.fence_schema_version}")
    lines.append("fences:")
    lines += [
        f"  {row.resource}  token={row.token}  since {row.updated_at}  tokens from {row.token_source}"
        + ("" if row.replication is None else f"  {_LAST_GRANT[row.replication]}")
        for row in result.fences
    ] or ["  (none yet: no resource has a token source)"]
    lines.append(f"ledger ({result.version_table}):")
    lines += [
        f"  {row.revision}  applied_token={row.applied_token}"
        + (" (none: applied before fencing)" if row.method == "adopt" else "")
        + f"  holder={row.holder}  {row.method} at {row.applied_at}"
        + ("" if row.state == "applied" else f"  DIRTY ({row.state})")
        for row in result.ledger
    ] or ["  (empty)"]
    for left in result.autocommit_leftovers:
        lines.append(
            f"AUTOCOMMIT: statements of revision {', '.join(left.revisions)} ({left.resource}) ran in an autocommit "
            f"block of a run by {left.holder} under token {left.token} that was FENCED at {left.fenced_at}; they may "
            "have been left applied: compare the schema with the revision"
        )
    for dirty in result.dirty:
        action = "upgrade" if dirty.state == "applying" else "downgrade"
        if dirty.token == 0:  # a write without a token, refused after MySQL had committed its DDL
            lines.append(
                f"DIRTY: {dirty.revision} ({dirty.version_table}): a plain alembic {action} (no fencing token) "
                f"was refused at {dirty.since} after its DDL had committed; fenced writes are refused until "
                f"`fencemigrate resolve {dirty.revision} --token N --as applied|rolled-back`"
            )
            continue
        lines.append(
            f"DIRTY: {dirty.revision} ({dirty.version_table}): {action} started under token {dirty.token} "
            f"by {dirty.holder} at {dirty.since} never finished; fenced writes are refused until "
            f"`fencemigrate resolve {dirty.revision} --token N --as applied|rolled-back`"
        )
    lines += [f"ERROR: {row.message}" for row in result.ledger_above_fence]
    lines += [f"ERROR: {row.message}" for row in result.fence_below_lease]
    lines += [f"WARNING: {row.message}" for row in result.implausible_leases]
    lines += [f"ERROR: {row.message}" for row in result.unexplained_tokens]
    altered = "ERROR: the fence schema differs from fencemigrate's:"
    lines += [f"{altered} {problem}" for problem in result.fence_schema_problems]
    lines += _tokenless_text(result)
    return "\n".join(lines)


def _tokenless_text(result: State) -> list[str]:
    """The version table's guard when it is off, and where the version table and the ledger disagree."""
    lines: list[str] = []
    guard, table = result.tokenless_writes, result.version_table
    if guard is not None and guard.status == ALLOWED:
        lines.append(
            f"tokenless writes to {table}: allowed (opted out at {guard.allowed_at}; "
            "`fencemigrate install --forbid-tokenless-writes` refuses them again)"
        )
    elif guard is not None and guard.status == UNGUARDED:
        lines.append(
            f"tokenless writes to {table}: not refused yet (the next fenced run or `fencemigrate install` guards it)"
        )
    lines += [
        f"NOT IN LEDGER: {revision} is applied by {table} but has no ledger row (written without a fencing token)"
        for revision in result.unrecorded.version_table_only
    ]
    lines += [
        f"NOT IN VERSION TABLE: {revision} has a ledger row but {table} does not have it applied "
        "(changed without a fencing token)"
        for revision in result.unrecorded.ledger_only
    ]
    return lines


if __name__ == "__main__":  # pragma: no cover
    main()

"""The Python API; every CLI command calls the function of the same name here.

    from fencemigrate import api, load_config
    api.upgrade(load_config(["alembic.ini"]), "head", token=34)
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Callable

from alembic import command as alembic_command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.dialects import postgresql

from .config import configured_resource, fence_schema
from .errors import FencemigrateError, UsageError
from .demo import DemoResult, run_demo
from .fence_schema import ensure_installed, install_script
from .resources import template_dir
from .runtime.environment import FENCED_RUN_ATTRIBUTE, run_env, translated_errors
from .runtime.fenced_run import FencedRun, HeadsMoved, Planner
from .runtime.outcome import RunOutcome
from .runtime.plans import downgrade_plan, reapply_plan, stamp_plan, upgrade_plan
from .runtime.settings import FenceSettings
from .state import State, read_state
from .validation import check_holder, check_resource, check_schema, parse_token

_RELATIVE = re.compile(r"[+-]\d+$")
_PLANNING_ATTEMPTS = 5


def upgrade(
    config: Config,
    revision: str,
    *,
    token: int | str | None,
    holder: str | None = None,
    resource: str | None = None,
    sql: bool = False,
    tag: str | None = None,
) -> RunOutcome:
    """``alembic upgrade``, with every step claiming the fence first."""
    start, destination = _split_range(revision, sql, "upgrade")
    return _fenced(
        config, "upgrade", destination, upgrade_plan, token, holder, resource, sql, tag, start
    )


def downgrade(
    config: Config,
    revision: str,
    *,
    token: int | str | None,
    holder: str | None = None,
    resource: str | None = None,
    sql: bool = False,
    tag: str | None = None,
) -> RunOutcome:
    """``alembic downgrade``, fenced; the ledger rows go in the same transaction as the DDL."""
    start, destination = _split_range(revision, sql, "downgrade")
    if sql and start is None:
        raise UsageError("downgrade with --sql needs a range FROM:TO")
    return _fenced(
        config, "downgrade", destination, downgrade_plan, token, holder, resource, sql, tag, start
    )


def reapply(
    config: Config,
    revision: str,
    *,
    token: int | str | None,
    holder: str | None = None,
    resource: str | None = None,
    tag: str | None = None,
) -> RunOutcome:
    """Roll back ``revision`` (and what sits above it) and apply it again, in one transaction.

    Legal only when every revision it rolls back was applied under ``token``.
    """
    return _fenced(
        config, "reapply", revision, reapply_plan, token, holder, resource, False, tag, None,
        single_transaction=True,
    )


def stamp(
    config: Config,
    revisions: str | tuple[str, ...],
    *,
    token: int | str | None,
    holder: str | None = None,
    resource: str | None = None,
    sql: bool = False,
    tag: str | None = None,
) -> RunOutcome:
    """``alembic stamp``, fenced: the version table moves only under a valid claim."""
    targets = (revisions,) if isinstance(revisions, str) else tuple(revisions)
    start: str | None = None
    destinations: list[str] = []
    for target in targets:
        first, destination = _split_range(target, sql, "stamp")
        if first is not None and start not in (None, first):
            raise UsageError("stamp with --sql takes a single starting revision")
        start = first or start
        destinations.append(destination)
    return _fenced(
        config, "stamp", tuple(destinations), stamp_plan, token, holder, resource, sql, tag, start
    )


def state(config: Config) -> State:
    """Heads, fence rows and the ledger, read through the project's env.py."""
    schema = check_schema(fence_schema(config))
    found: list[State] = []

    def read(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        found.append(read_state(context, schema))
        return []

    _run_without_steps(config, read)
    if not found:
        raise FencemigrateError("env.py did not run the migration context; cannot read state")
    return found[0]


def install(config: Config, sql: bool = False) -> str:
    """Install the fence schema through env.py's connection; with ``sql``, return the script instead."""
    schema = check_schema(fence_schema(config))
    if sql:
        return install_script(postgresql.dialect().identifier_preparer.quote(schema))  # type: ignore[no-untyped-call]
    outcome: list[bool] = []

    def do_install(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        assert context.connection is not None
        quoted = context.dialect.identifier_preparer.quote(schema)
        with context.begin_transaction(_per_migration=True):
            outcome.append(ensure_installed(context.connection, quoted))
        return []

    _run_without_steps(config, do_install)
    return "installed" if outcome and outcome[0] else "already installed"


def init(config: Config, directory: str) -> Path:
    """Write a new Alembic environment whose env.py refuses to migrate without a fence token."""
    target = Path(directory)
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"directory {directory!r} exists and is not empty")
    templates = _TemplateConfig(config.config_file_name, stdout=config.stdout)
    try:
        alembic_command.init(templates, directory, template=template_dir().name)
    except CommandError as error:
        raise UsageError(str(error)) from None
    return target


def demo(url: str, say: Callable[[str], None]) -> DemoResult:
    """Replay the design notes' incident fenced and with plain Alembic, on scratch databases at ``url``."""
    with translated_errors():
        return run_demo(url, say)


def current(config: Config, verbose: bool = False) -> None:
    """As ``alembic current``."""
    _alembic(alembic_command.current, config, verbose=verbose)


def heads(config: Config, verbose: bool = False) -> None:
    """As ``alembic heads``."""
    _alembic(alembic_command.heads, config, verbose=verbose)


def history(config: Config, rev_range: str | None = None, verbose: bool = False) -> None:
    """As ``alembic history``."""
    _alembic(alembic_command.history, config, rev_range=rev_range, verbose=verbose)


def show(config: Config, revision: str) -> None:
    """As ``alembic show``."""
    _alembic(alembic_command.show, config, revision)


# -- helpers -----------------------------------------------------------------------------------


class _TemplateConfig(Config):
    """A Config whose template directory is fencemigrate's data directory."""

    def get_template_directory(self) -> str:
        return str(template_dir().parent)


def _fenced(
    config: Config,
    command: str,
    destination: Any,
    plan_for: Callable[[ScriptDirectory, Any], Planner],
    token: int | str | None,
    holder: str | None,
    resource: str | None,
    sql: bool,
    tag: str | None,
    start: str | None,
    single_transaction: bool = False,
) -> RunOutcome:
    settings = FenceSettings(
        token=parse_token(token),
        holder=check_holder(holder),
        resource=check_resource(resource if resource is not None else configured_resource(config)),
        schema=check_schema(fence_schema(config)),
    )
    script = _script_directory(config)
    for target in (destination if isinstance(destination, tuple) else (destination,)) + (start,):
        _require_known(script, target)
    for _ in range(_PLANNING_ATTEMPTS):
        outcome = RunOutcome(command, settings.resource, settings.token, settings.holder, offline=sql)
        run = FencedRun(settings, plan_for(script, destination), outcome)
        config.attributes[FENCED_RUN_ATTRIBUTE] = run
        try:
            outcome.forced_single_transaction = run_env(
                config,
                script,
                run.migrations_fn,
                resource=settings.resource,
                token=settings.token,
                writes=not sql,
                single_transaction=single_transaction,
                as_sql=sql,
                starting_rev=start,
                destination_rev=destination,
                tag=tag,
            )
            return outcome
        except HeadsMoved:
            continue  # rolled back before any DDL: plan again from the new heads
        finally:
            config.attributes.pop(FENCED_RUN_ATTRIBUTE, None)
    raise FencemigrateError(
        f"the database's heads kept changing under concurrent writers ({_PLANNING_ATTEMPTS} attempts); "
        "nothing was applied by this run"
    )


def _run_without_steps(config: Config, fn: Callable[[tuple[str, ...], MigrationContext], list[Any]]) -> None:
    script = _script_directory(config)
    config.attributes[FENCED_RUN_ATTRIBUTE] = fn
    try:
        run_env(config, script, fn, dont_mutate=True)
    finally:
        config.attributes.pop(FENCED_RUN_ATTRIBUTE, None)


def _script_directory(config: Config) -> ScriptDirectory:
    try:
        return ScriptDirectory.from_config(config)
    except CommandError as error:
        raise UsageError(str(error)) from None


def _require_known(script: ScriptDirectory, revision: str | None) -> None:
    """Reject an unknown revision before the database is touched."""
    if revision in (None, "base", "head", "heads") or _RELATIVE.search(revision or ""):
        return
    try:
        script.revision_map.get_revisions(revision)
    except Exception as error:  # alembic raises several resolution error types
        raise UsageError(f"unknown revision {revision!r}: {error}") from None


def _split_range(revision: str, sql: bool, command: str) -> tuple[str | None, str]:
    if ":" not in revision:
        return None, revision
    if not sql:
        raise UsageError(f"a revision range ({revision}) is only allowed with --sql for {command}")
    start, _, destination = revision.partition(":")
    return start or None, destination


def _alembic(fn: Callable[..., None], config: Config, *args: Any, **kw: Any) -> None:
    with translated_errors():
        fn(config, *args, **kw)

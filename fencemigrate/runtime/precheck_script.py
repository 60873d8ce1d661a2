"""A ``--sql`` script in pre-check mode, for the mysql (or mariadb) client: MySQL and MariaDB.

The script does what a pre-check run does in the runner (:mod:`.precheck_run`), in plain SQL
(the ``script_*`` statements of ``sql/queries/mysql.sql``), checking as it goes and stopping at the first refusal:

1. the fence schema must be there, at the version this fencemigrate installs or later;
2. without ``--token``: the lease lock, then the named lock of the resource (each waiting at most
   ``--wait``), the heads read, and its own grant from the built-in lease service, refused for a
   Redis resource, while another holder's lease is live, while a revision is dirty, or unless the
   heads are the ones the script was written from; with ``--token N``: the named lock, then the
   claim of the fence with N (FENCED unless it holds);
3. before each revision's DDL, its ledger row is marked 'applying' / 'rolling_back' under the token
   while the fence still holds it (FENCED otherwise): a script that dies midway leaves it dirty;
   after Alembic's version write the mark is settled;
4. at the end: the lease it took released, then the named lock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from alembic.runtime.migration import MigrationContext, RevisionStep

from ..dialects import dialect_for
from ..dialects.fence_calls import MysqlScriptCalls, ScriptToken
from ..dialects.waits import WaitBound
from ..errors import UsageError
from ..fence.ledger import LedgerChange, ledger_change, read_revision_file, version_table_name
from .environment import create_version_table_if_missing
from .fenced_run import step_direction
from .outcome import RunOutcome, StepOutcome
from .plans import FencedStep, plan_or_fenced
from .request import Claimant, Planner, listed

_CLIENT = (
    "run it with the mysql or mariadb client in batch mode (mariadb DB < script), which stops at the first "
    "error; never with --force, which runs on past a refusal and exits 0 (the script then ends its own session)"
)


class PrecheckScript:
    """Writes a pre-check ``--sql`` script (see the module's docstring)."""

    def __init__(self, claimant: Claimant, planner: Planner, outcome: RunOutcome, waits: WaitBound) -> None:
        self.claimant = claimant
        self.planner = planner
        self.outcome = outcome
        self._waits = waits
        self._calls: MysqlScriptCalls | None = None
        self._context: MigrationContext | None = None
        self._written: list[tuple[Any, LedgerChange]] = []  # steps whose DDL is written, not yet settled
        self._steps_left = 0

    def connected(self, context: MigrationContext) -> None:
        """Never called: a script is written offline, without a connection."""

    # -- the function Alembic calls with the heads the script starts from ----------------------

    def migrations_fn(self, heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        """Plan the steps; write the script's checks, locks and grant (or claim) ahead of every
        statement Alembic writes, its version table's ``CREATE TABLE`` from base included."""
        steps, reapplied = plan_or_fenced(self.planner, self.claimant, heads, context)
        if reapplied:
            raise UsageError("reapply cannot be written as a --sql script on MySQL/MariaDB (nothing was written)")
        self.outcome.heads = sorted(heads)
        if not steps:
            return []
        self._context = context
        quoted_schema = context.dialect.identifier_preparer.quote(self.claimant.schema)
        self._calls = MysqlScriptCalls(context, quoted_schema)
        self._steps_left = len(steps)
        self._open(context, self._calls, sorted(heads))
        if not heads:  # a fenced database has its version table already (empty): the script creates it if not
            create_version_table_if_missing(context)
        context.on_version_apply_callbacks = (*context.on_version_apply_callbacks, self._after_version_write)
        return [FencedStep(step, self) for step in steps]

    def _open(self, context: MigrationContext, calls: MysqlScriptCalls, heads: list[str]) -> None:
        claimant = self.claimant
        grant = claimant.script_lease
        resource = claimant.resource
        if grant is None:
            what = f"fenced by token {claimant.token} on resource {resource!r}"
        else:
            what = (
                f"when it runs, this script takes its own lease of resource {resource!r} from the database's "
                f"lease service, as {claimant.holder!r}, and is fenced by the token it is granted; it refuses to "
                f"run unless the heads are {listed(heads)}"
            )
        version = dialect_for(context).schema_version()
        context.impl.static_output(
            f"-- fencemigrate: {what}; needs the fence schema {version} or later (fencemigrate install); {_CLIENT}"
        )
        major, minor = (int(part) for part in version.split("."))
        calls.write_check("script_schema_check", major=major, minor=minor)
        wait_s = math.ceil((grant.wait_ms if grant is not None else self._waits.wait_ms) / 1000)
        if grant is not None:
            calls.write_check("script_lease_lock", resource=resource, wait_s=wait_s)
        calls.write_check("script_named_lock", resource=resource, wait_s=wait_s)
        if grant is None:
            calls.write_statement("claim", resource=resource, token=claimant.token)
            calls.write_statement("seed_fence", resource=resource, token=claimant.token)
            calls.write_check("script_claim_check", resource=resource, token=claimant.token)
            return
        self.outcome.script_heads = heads
        calls.write_statement(
            "script_heads",
            version_schema=context.version_table_schema,
            version_table_name=context.version_table,
            version_table=_quoted_version_table(context),
        )
        said = {"resource": resource, "holder": claimant.holder}
        calls.write_check("script_grant_check", **said, heads=",".join(heads))
        calls.write_statement("script_grant", **said, ttl_ms=grant.ttl_ms)

    # -- one step ------------------------------------------------------------------------------

    def execute_step(self, step: Any, migration_fn: Callable[..., None], kw: dict[str, Any]) -> None:
        """Before the step's DDL: its checks and its mark; the DDL; settled after the version write."""
        calls, context = self._calls, self._context
        assert calls is not None and context is not None and context.script is not None
        claimant = self.claimant
        token = claimant.token
        where = {"version_table": version_table_name(context)}
        change = ledger_change(context.script, step)
        if isinstance(step, RevisionStep):
            revision = step.revision.revision
            identity = {**where, "revision": revision, "resource": claimant.resource, "token": token}
            if step.is_upgrade:
                assert step.revision.path is not None
                file = read_revision_file(step.revision.path)
                calls.write_statement(
                    "begin_apply", **identity, holder=claimant.holder, script_sha256=file.sha256, source=file.text
                )
                state = "applying"
            else:
                assert step.revision.path is not None
                sha256 = read_revision_file(step.revision.path).sha256
                calls.write_check("script_applied_file_check", **where, revision=revision, script_sha256=sha256)
                calls.write_statement("begin_rollback", **identity, holder=claimant.holder)
                state = "rolling_back"
            calls.write_check("script_mark_check", **identity, state=state)
        else:  # a stamp: no DDL, nothing to mark; its rows go in after the version write
            calls.write_check("script_fence_check", resource=claimant.resource, token=token)
        migration_fn(**kw)
        self._written.append((step, change))

    def _after_version_write(self, *, heads: set[str], **_: Any) -> None:
        """Settle the step just written, beside Alembic's version write; after the last one, release."""
        calls, context = self._calls, self._context
        assert calls is not None and context is not None and context.script is not None
        step, change = self._written.pop(0)
        claimant = self.claimant
        token = claimant.token
        where = {"version_table": version_table_name(context)}
        if isinstance(step, RevisionStep):
            revision = step.revision.revision
            calls.write_statement(
                "settle_apply" if step.is_upgrade else "settle_rollback", **where, revision=revision, token=token
            )
            calls.write_check("script_settled_check", **where, revision=revision, token=token, applied=step.is_upgrade)
        else:
            self._record_stamp(calls, change, where)
        self.outcome.heads = sorted(heads)
        self.outcome.steps.append(
            StepOutcome(
                revisions=change.added or change.removed,
                direction=step_direction(step, change),
                token=None if isinstance(token, ScriptToken) else token,
                atomic=not isinstance(step, RevisionStep),
            )
        )
        self._steps_left -= 1
        if not self._steps_left:
            if claimant.script_lease is not None:
                calls.write_statement("script_release", resource=claimant.resource, holder=claimant.holder)
            calls.write_statement("script_unlock", resource=claimant.resource)

    def _record_stamp(self, calls: MysqlScriptCalls, change: LedgerChange, where: dict[str, str]) -> None:
        """A stamp's ledger rows and events, as a pre-check run records them."""
        context = self._context
        assert context is not None and context.script is not None
        claimant = self.claimant
        who = {"resource": claimant.resource, "holder": claimant.holder, "token": claimant.token}
        for revision in change.removed:
            calls.write_statement("record_rollback", **where, revision=revision)
            calls.write_statement("log_event", at=None, kind="UNSTAMP", revision=revision, detail=None, **who)
        for revision in change.added:
            path = change.paths.get(revision) or context.script.get_revision(revision).path
            assert path is not None
            file = read_revision_file(path)
            calls.write_statement(
                "record_stamp", **where, revision=revision, script_sha256=file.sha256, source=file.text, **who
            )
            calls.write_statement("log_event", at=None, kind="STAMP", revision=revision, detail=None, **who)


def _quoted_version_table(context: MigrationContext) -> str:
    """Alembic's version table as the script's prepared statement names it (quoted, with its schema)."""
    quote = context.dialect.identifier_preparer.quote
    table = quote(context.version_table)
    schema = context.version_table_schema
    return table if schema is None else f"{quote(schema)}.{table}"

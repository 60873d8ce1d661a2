"""Rolling back a revision whose file changed since it was applied: the downgrade() of the text the
ledger recorded when it was applied runs, not the file's, since only it is known to undo what the
database has (a rewritten file's downgrade() drops what the applied version never created).

The file's sha256 is compared with the ledger row's ``script_sha256``; where they differ, the
step runs the recorded text's ``downgrade()`` (:class:`AppliedDowngrade`), and the outcome says so.
A row without text (written before the fence schema kept it) is refused
(:class:`~fencemigrate.errors.AppliedTextNotRecorded`), with nothing written, and so is a text that
does not hash to the row's ``script_sha256`` (:class:`~fencemigrate.errors.AppliedTextAltered`:
changed in the database after it was applied). The text is code whoever could write the ledger
wrote (docs/fencing.md, "What the applied text is"). A ``--sql`` script
cannot read the ledger when it is written: it checks, when it runs, that the database applied the
text whose downgrade it holds (:func:`require_applied_file`).
"""

from __future__ import annotations

import hashlib
import linecache
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alembic.runtime.migration import MigrationContext, RevisionStep

from ..dialects.fence_calls import FenceCalls
from ..errors import AppliedTextAltered, AppliedTextNotRecorded, RevisionFailed
from ..fence.ledger import AppliedSource, read_applied_sources, read_revision_file, version_table_name
from .environment import describe, locate
from .plans import refuse_if_superseded
from .request import Identity

if TYPE_CHECKING:  # fenced_run imports this module
    from .request import Planner


@dataclass(frozen=True)
class AppliedText:
    """The applied text a rolled-back revision's downgrade() came from, and the file it was not."""

    revision: str
    token: int  # the token that applied it
    holder: str
    applied_sha256: str
    file_sha256: str

    def as_json(self) -> dict[str, Any]:
        """The step's ``applied_text`` in ``--json`` output."""
        return {
            "applied_token": self.token,
            "applied_by": self.holder,
            "applied_sha256": self.applied_sha256,
            "file_sha256": self.file_sha256,
        }

    def described(self) -> str:
        """The outcome's line about it."""
        return (
            f"{self.revision}'s file changed since it was applied (sha256 {self.file_sha256[:12]} on disk): "
            f"ran the downgrade() of the text applied under token {self.token} by {self.holder} "
            f"(sha256 {self.applied_sha256[:12]}), not the file's"
        )


class AppliedDowngrade(RevisionStep):
    """Alembic's downgrade step of a revision, running the applied text's ``downgrade()``."""

    def __init__(
        self, step: RevisionStep, applied: AppliedText, downgrade: Callable[..., None], code_path: str
    ) -> None:
        super().__init__(step.revision_map, step.revision, is_upgrade=False)
        self.migration_fn = downgrade
        self.applied = applied
        self.code_path = code_path  # the applied text's name in tracebacks and error locations


def code_path(step: RevisionStep) -> str:
    """The file whose code the step runs: the revision's, or the applied text's name."""
    if isinstance(step, AppliedDowngrade):
        return step.code_path
    path = step.revision.path
    assert path is not None
    return path


def applied_text_of(step: Any) -> AppliedText | None:
    """The applied text a step runs the downgrade() of; None for any other step."""
    return step.applied if isinstance(step, AppliedDowngrade) else None


def rollback_detail(step: Any) -> dict[str, Any] | None:
    """The ROLLBACK event's detail of a step that runs the applied text's downgrade() (as in
    ``--json``: ``{"applied_text": {...}}``); None for any other step."""
    applied = applied_text_of(step)
    return None if applied is None else {"applied_text": applied.as_json()}


def running_applied_downgrades(plan: Planner, identity: Identity, token: Callable[[], int | None]) -> Planner:
    """``plan``, with each downgrade of a revision whose file differs from what the ledger says was
    applied turned into an :class:`AppliedDowngrade` (online; a script's run checks instead). A
    refusal tells a stale run (its ``token()``; None: not known yet) it is stale first."""
    loaded: dict[tuple[str, str], Callable[..., None]] = {}  # one load per text, however often it plans

    def planner(heads: tuple[str, ...], context: MigrationContext) -> tuple[list[Any], list[str]]:
        steps, reapplied = plan(heads, context)
        downgrades = [step.revision.revision for step in steps if _is_downgrade(step)]
        if context.as_sql or context.connection is None or not downgrades:
            return steps, reapplied
        # A read of our own ends as it began: a transaction it opened would look like env.py's own
        # to Alembic and to pre-check mode, which then would not commit the run's marks.
        opened = not context.connection.in_transaction()
        rows = read_applied_sources(context, identity.schema, downgrades)
        if opened:
            context.connection.rollback()
        return [_replaced(step, rows, context, identity, token, loaded) for step in steps], reapplied

    return planner


def _is_downgrade(step: Any) -> bool:
    return isinstance(step, RevisionStep) and not step.is_upgrade and step.revision.path is not None


def _replaced(
    step: Any,
    rows: dict[str, AppliedSource],
    context: MigrationContext,
    identity: Identity,
    token: Callable[[], int | None],
    loaded: dict[tuple[str, str], Callable[..., None]],
) -> Any:
    if not _is_downgrade(step):
        return step
    revision = step.revision.revision
    row = rows.get(revision)
    if row is None or row.script_sha256 is None:
        return step
    file_sha256 = read_revision_file(step.revision.path).sha256
    if row.script_sha256 == file_sha256:
        return step
    if row.source is None:
        refuse_if_superseded(identity, token(), context)  # a stale writer's news comes first
        raise AppliedTextNotRecorded(revision, row.token, file_sha256, row.script_sha256)
    text_sha256 = hashlib.sha256(row.source.encode()).hexdigest()
    if text_sha256 != row.script_sha256:
        refuse_if_superseded(identity, token(), context)
        raise AppliedTextAltered(revision, row.token, file_sha256, row.script_sha256, text_sha256)
    name = f"<{revision} as applied under token {row.token}, sha256 {row.script_sha256[:12]}>"
    key = (revision, row.script_sha256)
    if key not in loaded:
        loaded[key] = _downgrade_of(row, name)
    applied = AppliedText(revision, row.token, row.holder, row.script_sha256, file_sha256)
    return AppliedDowngrade(step, applied, loaded[key], name)


def _downgrade_of(row: AppliedSource, name: str) -> Callable[..., None]:
    """The ``downgrade()`` of the applied text, loaded as a module of its own named ``name`` (its
    lines shown in tracebacks); RevisionFailed, with nothing run, when it cannot be loaded."""
    assert row.source is not None
    linecache.cache[name] = (len(row.source), None, row.source.splitlines(keepends=True), name)
    module = types.ModuleType(f"fencemigrate_applied_{row.revision}")
    module.__file__ = name
    try:
        exec(compile(row.source, name, "exec"), module.__dict__)  # noqa: S102 - the text this database applied
        downgrade: Callable[..., None] = module.downgrade
    except Exception as error:
        raise RevisionFailed(
            row.revision, locate(error, name), describe(error), "; nothing was run", how=" to load as applied"
        ) from error
    return downgrade


def require_applied_file(calls: FenceCalls, context: MigrationContext, step: RevisionStep) -> None:
    """A ``--sql`` script's downgrade of ``step`` first checks, when it runs, that the database
    applied the file whose downgrade() it holds (or recorded no sha256 of it); else it stops there,
    its transaction rolled back."""
    assert step.revision.path is not None
    where = {"version_table": version_table_name(context), "revision": step.revision.revision}
    sha256 = read_revision_file(step.revision.path).sha256
    calls.require_applied_file(where["version_table"], where["revision"], sha256)

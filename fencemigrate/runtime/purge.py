"""``stamp --purge``, fenced: the version table's rows go by ordinary stamp steps, each claiming
the fence first, instead of Alembic's DELETE before the migration function (before any claim).

Each row of the version table (known revision or not) is deleted by a branch-deleting
:class:`PurgeStep`; the first one also takes every ledger row of the version table with it, so
that after the stamp the ledger holds exactly the revisions the version table applies.
"""

from __future__ import annotations

from collections.abc import Callable

from alembic.runtime.migration import MigrationContext, StampStep
from alembic.script.revision import RevisionMap

from ..dialects import installed_version
from ..fence.guard import VersionTable
from ..queries import statement


class PurgeStep(StampStep):
    """Deletes one version row (as a stamp down to base does); ``ledger_removed`` reads the ledger
    rows the step removes, when the step runs (after its claim, in its transaction)."""

    def __init__(self, head: str, context: MigrationContext, ledger_removed: Callable[[], tuple[str, ...]]) -> None:
        super().__init__(head, None, is_upgrade=False, branch_move=True, revision_map=_revision_map(context))
        self.ledger_removed = ledger_removed


def purge_steps(heads: tuple[str, ...], context: MigrationContext, schema: str) -> list[PurgeStep]:
    """One step per version row; the first removes the whole ledger of the version table."""
    return [
        PurgeStep(head, context, (lambda: ledger_revisions(context, schema)) if index == 0 else tuple)
        for index, head in enumerate(sorted(heads))
    ]


def ledger_revisions(context: MigrationContext, schema: str) -> tuple[str, ...]:
    """Every revision the ledger records for the context's version table (none before install)."""
    connection = context.connection
    if connection is None or context.as_sql:
        return ()
    quoted = context.dialect.identifier_preparer.quote(schema)
    if installed_version(connection, quoted) is None:
        return ()
    rows = connection.execute(
        statement("ledger_rows", quoted, connection.dialect.name), {"version_table": VersionTable.of(context).name}
    )
    return tuple(row.revision for row in rows)


def _revision_map(context: MigrationContext) -> RevisionMap:
    assert context.script is not None
    return context.script.revision_map

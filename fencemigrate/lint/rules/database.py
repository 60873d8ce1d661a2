"""Rules that compare the directory with the database (``check --db``), the one that runs Alembic's
own ``check`` (the models compared with the database), and those for what only tampering with the
fence leaves in the database."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator

from ...fence.state import LedgerRow
from ..database import DatabaseSnapshot, ModelComparison
from ..findings import Finding
from ..revisions import RevisionFile
from .base import CheckContext, Rule

NOT_RUN_WITHOUT_DATABASE = "--no-db: neither the database nor the models compared (FM408, what alembic check does)"
"""The note of a check with ``--no-db``: the lint alone, which ``alembic check`` is not."""

# The note after the comparison, in the words ``alembic check`` prints (alembic/command.py, check()).
_DETECTED = "model comparison: New upgrade operations detected (FM408)"
_NONE_DETECTED = "model comparison: No new upgrade operations detected"


class ModelDrift(Rule):
    """FM408: the database differs from the models, as ``alembic check`` finds it."""

    id = "FM408"
    name = "model-drift"
    summary = (
        "the database differs from the models (env.py's target_metadata), as `alembic check` finds it: "
        "one finding per difference autogenerate would migrate (add_column users.email, remove_table legacy, "
        "modify_type, modify_nullable, ...); nothing when env.py has no target_metadata"
    )
    fix = (
        "write the revision that makes the database match the models (`alembic revision --autogenerate`, "
        "then review it), or change the models to match the database"
    )
    needs_database = True
    needs_models = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for difference in _models(context).differences:
            yield self.finding(difference.message)

    def note(self, context: CheckContext) -> str | None:
        models = _models(context)
        if models.not_compared is not None:
            return f"model comparison: {models.not_compared}"
        return _DETECTED if models.differences else _NONE_DETECTED


def _models(context: CheckContext) -> ModelComparison:
    assert context.database is not None and context.database.models is not None, "FM408 runs only with --db"
    return context.database.models


_FIX = (
    "find out who lowered the fence (a guard trigger disabled or dropped: FM405, `fencemigrate install` "
    "puts it back), then check what the stale tokens wrote; own the fence by another role (README, Two roles)"
)


class LedgerAboveFence(Rule):
    """FM411: a ledger row applied under a token above its resource's fence token: no run can leave
    that, only a fence lowered behind the guard's back, after which stale tokens can write."""

    id = "FM411"
    name = "ledger-above-fence"
    summary = (
        "a ledger row applied under a token above the fence token of its resource (or with no fence row): "
        "the fence was lowered after it was written, so stale tokens may have got through"
    )
    fix = _FIX
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        assert context.database is not None, "database rules run only with --db"
        for row in context.database.state.ledger_above_fence:
            yield self.finding(row.message, revision=row.revision)


class FenceBelowLease(Rule):
    """FM412: a fence token below the last token the built-in lease service issued: every grant
    advances the fence to its token, so the fence was lowered."""

    id = "FM412"
    name = "fence-below-lease"
    summary = (
        "a fence token below the last token the built-in lease service issued (or no fence row): "
        "the fence was lowered, so stale tokens are no longer fenced"
    )
    fix = _FIX
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        assert context.database is not None, "database rules run only with --db"
        for row in context.database.state.fence_below_lease:
            yield self.finding(row.message)


class UnguardedVersionTable(Rule):
    """FM410: Alembic's version table has no guard trigger on a fenced database that never allowed
    tokenless writes: its owner dropped (or disabled) the guard, and plain alembic writes again."""

    id = "FM410"
    name = "version-table-unguarded"
    summary = (
        "Alembic's version table has no guard trigger (dropped or disabled) on a fenced database whose "
        "tokenless writes were never allowed: plain alembic writes it without a fencing token"
    )
    fix = (
        "find out who removed the guard and what was written without a token (FM407); `fencemigrate install` "
        "puts it back (on SQLite and MySQL, once no other table holds triggers of the guard's names: a version "
        "table renamed keeps them, and runs refuse until they are dropped); with two roles the fence's owner owns "
        "the version table (`install --grant-to ROLE`)"
    )
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        assert context.database is not None, "database rules run only with --db"
        state = context.database.state
        if state.unguarded_version_table:
            yield self.finding(
                f"the version table {state.version_table} has no guard trigger, and tokenless writes were never "
                "allowed: plain alembic writes it without a fencing token"
            )


class UnexplainedToken(Rule):
    """FM413: a lease token counter, or the fence token of a resource whose tokens come from a lease
    service, that no recorded grant issued: every grant logs a GRANT event of its token, so it was
    written behind the lease service's back (a forged grant), and every later grant starts above it."""

    id = "FM413"
    name = "token-without-grant"
    summary = (
        "a lease token counter, or the fence token of a leased resource, that no recorded grant issued: it was "
        "raised behind the lease service's back, and every later grant must issue above it"
    )
    fix = (
        "find out who wrote it (with one role, the guard triggers switched off: FM405; with two roles only the "
        "owner can); tokens above the last real grant were never issued, so nothing legitimate holds them, but "
        "no grant can lower the counter: restore the rows as the owner, or move the resource to a new name"
    )
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        assert context.database is not None, "database rules run only with --db"
        for row in context.database.state.unexplained_tokens:
            yield self.finding(row.message)


def _database(context: CheckContext) -> DatabaseSnapshot:
    assert context.database is not None, "database rules run only with --db"
    return context.database


class PendingRevision(Rule):
    """FM401: a revision the database does not have yet."""

    id = "FM401"
    name = "pending-revision"
    summary = "a revision not applied to the database: the database is not at head"
    fix = "apply it: `fencemigrate upgrade head`"
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        state, graph = _database(context).state, context.graph
        applied = graph.ancestors(state.heads) | graph.ancestors(row.revision for row in state.ledger)
        where = f"database at {', '.join(state.heads)}" if state.heads else "no revision is applied"
        for item in sorted(graph.files.values(), key=graph.order_key):
            if item.revision not in applied:
                yield self.at(item, item.revision_line, f"{item.revision} is not applied to the database ({where})")


class ChecksumDrift(Rule):
    """FM402: a revision file changed after it was applied: an agent rewrote an applied migration."""

    id = "FM402"
    name = "checksum-drift"
    summary = "a revision file changed after it was applied: its sha256 differs from the one in the ledger"
    fix = "restore the file as it was applied, and make the change in a new revision"
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        database = _database(context)
        for row in database.state.ledger:
            item = context.graph.files.get(row.revision)
            # A dirty revision is FM406's: fixing its file is the usual way out, not drift.
            if item is None or row.state != "applied" or row.script_sha256 in (None, item.sha256):
                continue
            applied = database.applied_texts.get(row.revision)
            finding = self.at(
                item,
                item.revision_line,
                f"{row.revision} changed after it was applied: its sha256 is now {item.sha256[:12]}, "
                f"the ledger has {row.script_sha256[:12]} ({_how_applied(row)} at {row.applied_at})",
                "restore the file as it was applied ("
                + (
                    f"`fencemigrate show {row.revision} --applied > {item.display}`"
                    if applied is not None
                    else f"`git log -p -- {item.display}`"
                )
                + "), and make the change in a new revision",
            )
            yield finding if applied is None else dataclasses.replace(finding, diff=_diff(applied, item))


def _how_applied(row: LedgerRow) -> str:
    """Who applied a ledger row's revision, under which token (none: adopted, applied before fencing)."""
    if row.method == "adopt":
        return f"adopted by {row.holder}: applied before fencing, by no token"
    return f"applied under token {row.applied_token} by {row.holder}"


def _diff(applied: str, item: RevisionFile) -> str:
    """The unified diff from the text the ledger recorded to the file on disk."""
    on_disk = item.path.read_bytes().decode("utf-8")  # as read, line endings kept
    lines = difflib.unified_diff(
        applied.splitlines(keepends=True),
        on_disk.splitlines(keepends=True),
        fromfile=f"applied/{item.display}",
        tofile=f"on disk/{item.display}",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


class MissingAppliedRevision(Rule):
    """FM403: a revision the database has and the directory does not."""

    id = "FM403"
    name = "missing-applied-revision"
    summary = "a revision applied in the database (version table or ledger) that no revision file has"
    fix = "restore its file from version control: without it nobody can downgrade past it or see what it did"
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        state = _database(context).state
        ledger = {row.revision: row for row in state.ledger}
        looked_in = ", ".join(context.directory.locations)
        for revision in sorted(set(state.heads) | set(ledger)):
            if revision in context.graph.files:
                continue
            message = f"{revision} is applied in the database, but no revision file in {looked_in} has it"
            row = ledger.get(revision)
            if row is not None:
                message += f" (the ledger has it {_how_applied(row).removeprefix('applied ')})"
            yield self.finding(message, revision=revision)


class FenceSchemaMissing(Rule):
    """FM404: no fence schema in the database."""

    id = "FM404"
    name = "fence-schema-missing"
    summary = "the fence schema is not installed in the database"
    fix = "run `fencemigrate install` (any fenced run also installs it)"
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        database = _database(context)
        if database.state.fence_schema_version is None:
            yield self.finding(
                f"the fence schema {database.schema} is not installed: no fenced run has written to this database"
            )


class FenceSchemaAltered(Rule):
    """FM405: the fence schema differs from the install script of its version (a neutered
    ``agent_fence_guard()`` or ``claim()`` would let stale writers through)."""

    id = "FM405"
    name = "fence-schema-altered"
    summary = (
        "the fence schema differs from fencemigrate's install script: a table, guard trigger or function "
        "missing, a trigger disabled or changed, a function body replaced"
    )
    fix = (
        "find out who changed it (stale writers may get through), then recreate it as fencemigrate's "
        "install script has it (`fencemigrate install --sql`; sql/sqlite/ on SQLite, sql/mysql/ on MySQL)"
    )
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        database = _database(context)
        version = database.state.fence_schema_version
        for problem in database.fence_problems:
            yield self.finding(f"the fence schema {database.schema} ({version}) differs from fencemigrate's: {problem}")


class DirtyRevision(Rule):
    """FM406: a revision whose DDL started in pre-check mode and never finished."""

    id = "FM406"
    name = "dirty-revision"
    summary = (
        "a dirty revision: pre-check mode (the default on MySQL/MariaDB) started its DDL and never finished "
        "it, so it may be partly applied; fenced writes to its resource are refused until it is resolved"
    )
    fix = (
        "compare the schema with the revision, finish or undo what it did by hand, then "
        "`fencemigrate resolve REV --token N --as applied|rolled-back`"
    )
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        state = _database(context).state
        for dirty in state.dirty:
            action = "upgrade" if dirty.state == "applying" else "downgrade"
            message = (
                f"{dirty.revision} is dirty: its {action} was started under token {dirty.token} by {dirty.holder} "
                f"at {dirty.since} and never finished ({dirty.version_table}); "
                "fenced writes are refused until it is resolved"
            )
            fix = (
                f"compare the schema with {dirty.revision}, finish or undo what it did by hand, then "
                f"`fencemigrate resolve {dirty.revision} --token N --as applied|rolled-back`"
            )
            item = context.graph.files.get(dirty.revision)
            if item is not None and dirty.version_table == state.version_table:
                yield self.at(item, item.revision_line, message, fix)
            else:
                yield self.finding(message, revision=dirty.revision, fix=fix)


class UnrecordedVersionWrite(Rule):
    """FM407: the version table and the ledger disagree: something wrote one without a fencing token."""

    id = "FM407"
    name = "unrecorded-version-write"
    summary = (
        "the version table and the ledger disagree: a revision applied by the version table with no "
        "ledger row, or a ledger row for a revision the version table does not have (plain alembic, "
        "no fencing token)"
    )
    fix = (
        "find out who migrated without a token; make the ledger match what is really applied under a "
        "token (`fencemigrate stamp base`, then `fencemigrate stamp REV`)"
    )
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        state = _database(context).state
        table = state.version_table
        for revision in state.unrecorded.version_table_only:
            yield self._found(
                context,
                revision,
                f"{revision} is applied by {table} but has no ledger row: it was written without a fencing token",
            )
        for revision in state.unrecorded.ledger_only:
            yield self._found(
                context,
                revision,
                f"{revision} has a ledger row but {table} does not have it applied: the version table was "
                "changed without a fencing token",
            )

    def _found(self, context: CheckContext, revision: str, message: str) -> Finding:
        item = context.graph.files.get(revision)
        if item is not None:
            return self.at(item, item.revision_line, message)
        return self.finding(message, revision=revision)

"""Writes ledger rows; while one transaction holds the claim, it batches them into one call."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from ..dialects.fence_calls import FenceCalls
from .ledger_changes import LedgerChange, script_sha256
from .settings import FenceSettings


class LedgerWriter:
    """Ledger changes of the steps of one run, written in order."""

    def __init__(self, calls: FenceCalls, script: ScriptDirectory, settings: FenceSettings, version_table: str) -> None:
        self._calls = calls
        self._script = script
        self._settings = settings
        self._version_table = version_table
        self._pending: list[LedgerChange] = []

    def defer(self, change: LedgerChange) -> None:
        """Keep ``change`` for the next flush (the caller holds the claim in this transaction)."""
        self._pending.append(change)

    def has_deferred(self) -> bool:
        """True when deferred changes wait to be written."""
        return bool(self._pending)

    def flush(self, change: LedgerChange | None = None) -> int | None:
        """Write every deferred change, then ``change``; returns the transaction id (None offline)."""
        changes = [*self._pending, *([change] if change is not None else [])]
        self._pending = []
        settings, calls = self._settings, self._calls
        if calls.offline:
            # One readable call per revision in the script.
            for item in changes:
                for revision in item.removed:
                    calls.record_rollback(
                        self._version_table, revision, settings.resource, settings.token, settings.holder
                    )
                for revision in item.added:
                    calls.record_apply(
                        self._version_table,
                        revision,
                        settings.resource,
                        settings.token,
                        settings.holder,
                        item.method,
                        self._sha256(item, revision),
                    )
            return None
        rows: list[tuple[str, str, str, str | None]] = []
        for item in changes:
            rows += [("rollback", revision, item.method, None) for revision in item.removed]
            rows += [("apply", revision, item.method, self._sha256(item, revision)) for revision in item.added]
        return calls.record_steps(self._version_table, settings.resource, settings.token, settings.holder, rows)

    def _sha256(self, change: LedgerChange, revision: str) -> str:
        path = change.paths.get(revision) or self._script.get_revision(revision).path
        return script_sha256(path)

"""Rules about rolling back."""

from __future__ import annotations

from collections.abc import Iterator

from ..findings import Finding, Severity
from ..revision_code import is_empty
from .base import CheckContext, Rule


class MissingDowngrade(Rule):
    """FM301 (warning): an upgrade() with no downgrade() to undo it."""

    id = "FM301"
    name = "missing-downgrade"
    severity = Severity.WARNING
    summary = (
        "`downgrade()` missing, empty or only `pass` while `upgrade()` does something: "
        "`downgrade` and `reapply` cannot go past this revision"
    )
    fix = "write downgrade() to undo upgrade(), or `# fencemigrate: allow FM301 because <why it cannot be undone>`"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.readable:
            if is_empty(item.function("upgrade")):
                continue
            downgrade = item.function("downgrade")
            if downgrade is None:
                yield self.at(item, item.revision_line, "there is no downgrade(): this revision cannot be rolled back")
            elif is_empty(downgrade):
                yield self.at(item, downgrade.lineno, "downgrade() is empty: this revision cannot be rolled back")

"""Rules about the files themselves: unreadable revisions, suppressions that suppress nothing."""

from __future__ import annotations

from collections.abc import Iterator

from ..findings import Finding
from .base import CheckContext, Rule


class UnparsableRevision(Rule):
    """FM901: a file in the versions directory that Alembic could not load as a revision."""

    id = "FM901"
    name = "unparsable-revision"
    summary = "a revision file that does not parse, is not UTF-8, or has no literal `revision` id"
    fix = "fix the file so that Python parses it, with `revision` and `down_revision` as string literals"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.directory.files:
            if item.problem is not None:
                yield self.finding(f"this revision file {item.problem}", item.display, item.problem_line)


class BadSuppression(Rule):
    """FM902: an allow comment or pyproject entry without a reason, or naming no known rule."""

    id = "FM902"
    name = "bad-suppression"
    summary = (
        "`# fencemigrate: allow ...` without `because <reason>` or naming an unknown rule, "
        "and the same in pyproject.toml: it suppresses nothing"
    )
    fix = "write `# fencemigrate: allow RULE-ID because <reason>` with a rule id from `fencemigrate check --help`"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.directory.files:
            for bad in item.bad_allows:
                yield self.finding(f"`{bad.comment}` {bad.problem}", item.display, bad.line, item.revision)
            for allow in item.allows:
                for key in allow.rules:
                    if not context.knows(key):
                        yield self.finding(
                            f"`# fencemigrate: allow {key}` names no rule: it suppresses nothing",
                            item.display,
                            allow.line,
                            item.revision,
                        )
        settings = context.settings
        for entry in settings.allows:
            rules = ", ".join(entry.rules)
            if not entry.reason:
                yield self.finding(
                    f"the allow entry for {rules} gives no reason, so it suppresses nothing",
                    settings.file,
                    entry.line,
                    fix='add `reason = "..."` to the entry: why this is safe here',
                )
            for key in entry.rules:
                if not context.knows(key):
                    yield self.finding(
                        f"the allow entry names no rule {key!r}: it suppresses nothing", settings.file, entry.line
                    )

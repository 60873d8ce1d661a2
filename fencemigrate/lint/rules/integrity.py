"""Rules about the revision graph: what breaks ``upgrade head`` before any SQL runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ..findings import Finding
from ..revision_file import RevisionFile
from .base import CheckContext, Rule


class MultipleHeads(Rule):
    """FM101: more than one head."""

    id = "FM101"
    name = "multiple-heads"
    summary = "more than one head: branches that are not merged, so `upgrade head` cannot choose"
    fix = "merge the heads with `alembic merge`, or point one revision's down_revision at the other head"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        heads = context.graph.heads
        if len(heads) < 2:
            return
        fix = f'merge them: `alembic merge -m "merge heads" {" ".join(heads)}`, or rebase one onto the other'
        for head in heads:
            item = context.graph.files[head]
            yield self.at(
                item,
                item.revision_line,
                f"{head} is one of {len(heads)} heads ({', '.join(heads)}): the branches are not merged",
                fix,
            )


class MissingDownRevision(Rule):
    """FM102: a down_revision naming a revision that no file has."""

    id = "FM102"
    name = "missing-down-revision"
    summary = "a `down_revision` that names a revision no file has"
    fix = "restore the missing revision's file, or point down_revision at an existing revision"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.readable:
            for parent in item.down_revisions:
                if parent not in context.graph.files:
                    yield self.at(
                        item, item.down_revision_line, f"down_revision names {parent}, which no revision file has"
                    )


class DuplicateRevisionId(Rule):
    """FM103: two files with the same revision id."""

    id = "FM103"
    name = "duplicate-revision-id"
    summary = "two revision files with the same revision id"
    fix = "give one of them a new revision id (and update the down_revision that points at it)"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        by_id: dict[str, list[RevisionFile]] = defaultdict(list)
        for item in context.readable:
            by_id[item.revision or ""].append(item)
        for revision, items in sorted(by_id.items()):
            first, *others = sorted(items, key=lambda item: item.display)
            for item in others:
                yield self.at(item, item.revision_line, f"revision id {revision} is also used by {first.display}")


class RevisionCycle(Rule):
    """FM104: down_revisions that lead back to where they started."""

    id = "FM104"
    name = "revision-cycle"
    summary = "down_revisions that form a cycle"
    fix = "point one of these down_revisions at a revision outside the cycle"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for cycle in context.graph.cycles:
            item = context.graph.files[cycle[0]]
            chain = " -> ".join((*cycle, cycle[0]))
            yield self.at(item, item.down_revision_line, f"down_revision forms a cycle: {chain}")

"""Rules about the files themselves and the graph they declare: unreadable revisions, suppressions
that suppress nothing, what breaks ``upgrade head`` before any SQL runs, and renumbered copies (a
migration added again under a new number, the way a FENCED agent could route around its rejection:
``0042_add_invoice_currency`` back as ``0043_add_invoice_currency``). Each copy is reported once,
in the later file (by position in the graph, then by path), against the earliest revision it
copies."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ..code import body_tokens
from ..findings import Finding
from ..revisions import RevisionFile
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


# "Nearly the same": one upgrade() is the other with tokens added, and keeps this share of them.
NEAR_SHARE = 0.8

_FIX = (
    "do not re-add a migration under a new number: run `fencemigrate state` and re-plan "
    "(or, if both are meant, `# fencemigrate: allow {rule} because <why>`)"
)


class RenumberedCopy(Rule):
    """FM105: two revisions whose upgrade() is the same, or nearly: one is the other with a few tokens
    added, keeping at least 80 % (``NEAR_SHARE``) of the longer one."""

    id = "FM105"
    name = "renumbered-copy"
    summary = (
        "two revisions whose `upgrade()` is the same or nearly the same (one is the other with a few "
        "tokens added; comments, docstrings, layout, quotes and the spacing and case of SQL aside)"
    )
    fix = _FIX.format(rule="FM105")

    def check(self, context: CheckContext) -> Iterator[Finding]:
        graph = context.graph
        bodies = [(item, tokens) for item in graph.files.values() if (tokens := body_tokens(item.function("upgrade")))]
        index: dict[str, list[int]] = defaultdict(list)
        for position, (_, tokens) in enumerate(bodies):
            for token in set(tokens):
                index[token].append(position)
        copies: dict[int, tuple[int, bool]] = {}  # later body -> (earliest body it copies, identical)
        for position, (_, tokens) in enumerate(bodies):
            # Every body that contains this (shorter) one contains its rarest token.
            rarest = min(set(tokens), key=lambda token: (len(index[token]), token))
            for other in index[rarest]:
                longer = bodies[other][1]
                if other == position or len(longer) < len(tokens) or (len(longer) == len(tokens) and other < position):
                    continue
                if len(tokens) < NEAR_SHARE * len(longer) or not _is_subsequence(tokens, longer):
                    continue
                earlier, later = sorted((position, other), key=lambda k: graph.order_key(bodies[k][0]))
                known = copies.get(later)
                if known is None or graph.order_key(bodies[earlier][0]) < graph.order_key(bodies[known[0]][0]):
                    copies[later] = (earlier, tokens == longer)
        for later, (earlier, identical) in sorted(copies.items(), key=lambda pair: bodies[pair[0]][0].display):
            item, original = bodies[later][0], bodies[earlier][0]
            function = item.function("upgrade")
            assert function is not None
            how = "the same as" if identical else "nearly the same as"
            yield self.at(
                item,
                function.lineno,
                f"upgrade() is {how} in {original.revision} ({original.display}): a renumbered copy",
            )


class RenumberedSlug(Rule):
    """FM106: two revisions with the same slug."""

    id = "FM106"
    name = "renumbered-slug"
    summary = (
        "two revisions with the same slug (the file name without revision id and leading numbers or "
        "dates: `0042_add_invoice_currency`, `0043_add_invoice_currency`); merge revisions aside"
    )
    fix = _FIX.format(rule="FM106")

    def check(self, context: CheckContext) -> Iterator[Finding]:
        graph = context.graph
        by_slug: dict[str, list[RevisionFile]] = defaultdict(list)
        for item in graph.files.values():
            if item.slug and len(item.down_revisions) < 2:
                by_slug[item.slug].append(item)
        for slug, items in sorted(by_slug.items()):
            first, *others = sorted(items, key=graph.order_key)
            for item in others:
                yield self.at(
                    item,
                    item.revision_line,
                    f"{item.revision} has the same slug as {first.revision}, {slug!r} ({first.display}): "
                    "a renumbered copy",
                )


def _is_subsequence(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    remaining = iter(long)
    return all(token in remaining for token in short)


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

"""Renumbered copies: a migration added again under a new number, the way a FENCED agent could
route around its rejection (``0042_add_invoice_currency`` back as ``0043_add_invoice_currency``).

Each copy is reported once, in the later file (by position in the graph, then by path),
against the earliest revision it copies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ..findings import Finding
from ..revision_code import body_tokens
from ..revision_file import RevisionFile
from .base import CheckContext, Rule

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

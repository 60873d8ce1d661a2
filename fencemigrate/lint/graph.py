"""The revision graph as the files declare it: ids, down_revisions, heads, cycles, order."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .revision_file import RevisionFile


@dataclass(frozen=True)
class RevisionGraph:
    """Revisions by id (the first file by path when an id is used twice) and how they connect.

    ``generation`` is the length of the longest chain of known down_revisions below a revision:
    the later of two revisions is the one with the higher (generation, path).
    """

    files: dict[str, RevisionFile]
    parents: dict[str, tuple[str, ...]]
    heads: tuple[str, ...]
    generation: dict[str, int]
    cycles: tuple[tuple[str, ...], ...]

    def order_key(self, revision: RevisionFile) -> tuple[int, str]:
        """Sorts earlier revisions first."""
        return self.generation.get(revision.revision or "", 0), revision.display

    def ancestors(self, revisions: Iterable[str]) -> set[str]:
        """``revisions`` and every revision below them, through known down_revisions."""
        found: set[str] = set()
        pending = [revision for revision in revisions if revision in self.files]
        while pending:
            revision = pending.pop()
            if revision not in found:
                found.add(revision)
                pending += self.parents[revision]
        return found


def build_graph(files: Iterable[RevisionFile]) -> RevisionGraph:
    """The graph of the readable revision files."""
    by_id: dict[str, RevisionFile] = {}
    for revision_file in sorted(files, key=lambda item: item.display):
        if revision_file.revision is not None:
            by_id.setdefault(revision_file.revision, revision_file)
    parents = {
        revision: tuple(parent for parent in item.down_revisions if parent in by_id) for revision, item in by_id.items()
    }
    children = {parent for item in by_id.values() for parent in item.down_revisions}
    heads = tuple(sorted(revision for revision in by_id if revision not in children))
    generation, cycles = _generations(parents)
    return RevisionGraph(by_id, parents, heads, generation, cycles)


def _generations(parents: dict[str, tuple[str, ...]]) -> tuple[dict[str, int], tuple[tuple[str, ...], ...]]:
    """Longest known chain below each revision, and the cycles met on the way (depth-first, no recursion)."""
    generation: dict[str, int] = {}
    visiting: set[str] = set()
    cycles: list[tuple[str, ...]] = []
    for root in sorted(parents):
        if root in generation:
            continue
        path = [root]
        stack = [iter(parents[root])]
        visiting.add(root)
        while stack:
            parent = next(stack[-1], None)
            if parent is None:
                node = path.pop()
                stack.pop()
                visiting.discard(node)
                generation[node] = 1 + max((generation.get(p, -1) for p in parents[node]), default=-1)
            elif parent in visiting:
                cycles.append(tuple(path[path.index(parent) :]))
            elif parent not in generation:
                visiting.add(parent)
                path.append(parent)
                stack.append(iter(parents[parent]))
    return generation, tuple(cycles)

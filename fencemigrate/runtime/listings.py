"""``current``, ``heads``, ``history`` and ``show`` as data (their ``--json``), read from the revision
files as Alembic's own commands read them; the text forms are Alembic's, printed by Alembic, or in
Alembic's own format (``history_lines``, ``show_lines``) when fencemigrate read the database's heads
itself, without the version table Alembic would create.

Alembic's commands that name revisions by what the database holds: ``current``, ``heads``,
``history``, ``show`` (printed by Alembic or in its format, or as a listing for ``--json``) and
``edit``. The revisions they name are resolved first (bad usage, in Alembic's words); the
database's heads are read through env.py without creating the version table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alembic import command as alembic_command
from alembic.config import Config
from alembic.script import Script, ScriptDirectory
from alembic.util import CommandError, DatabaseNotAtHead, asbool

from ..alembic_internals import listed_dependencies, mark_current
from ..connections import translated_errors
from ..errors import UsageError
from .authoring import open_in_editor, revision_files
from .environment import alembic_read, check_configured_url, database_heads, print_stdout
from .revisions import RELATIVE, alembic_words, script_directory


def _as_tuple(ids: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """``down_revision`` as a tuple, as Alembic lists it: none, one id, or several."""
    if ids is None:
        return ()
    return (ids,) if isinstance(ids, str) else tuple(ids)


@dataclass(frozen=True)
class RevisionInfo:
    """One revision file: its id, its place in the graph and its docstring's first paragraph."""

    revision: str
    down_revisions: tuple[str, ...]
    branch_labels: tuple[str, ...]
    depends_on: tuple[str, ...]
    is_head: bool
    is_branch_point: bool
    is_merge_point: bool
    doc: str
    path: str
    is_current: bool | None = None  # history --indicate-current only

    @classmethod
    def of(cls, script: Script, current: tuple[str, ...] | None = None) -> RevisionInfo:
        """``script``'s facts; ``is_current`` when the database's heads ``current`` are given."""
        return cls(
            revision=script.revision,
            down_revisions=_as_tuple(script.down_revision),
            branch_labels=tuple(sorted(script.branch_labels)),
            depends_on=listed_dependencies(script),
            is_head=script.is_head,
            is_branch_point=script.is_branch_point,
            is_merge_point=script.is_merge_point,
            doc=script.doc,
            path=script.path,
            is_current=None if current is None else script.revision in current,
        )

    def as_json(self) -> dict[str, Any]:
        """JSON form, one item of the list each command prints."""
        found = {
            "revision": self.revision,
            "down_revisions": list(self.down_revisions),
            "branch_labels": list(self.branch_labels),
            "depends_on": list(self.depends_on),
            "is_head": self.is_head,
            "is_branch_point": self.is_branch_point,
            "is_merge_point": self.is_merge_point,
            "doc": self.doc,
            "path": self.path,
        }
        return found if self.is_current is None else {**found, "is_current": self.is_current}


@dataclass(frozen=True)
class RevisionListing:
    """What one of the four commands lists, under ``key``; ``database_heads`` when it read the database."""

    key: str  # "current", "heads" or "revisions"
    revisions: tuple[RevisionInfo, ...]
    database_heads: tuple[str, ...] | None = None

    def as_json(self) -> dict[str, Any]:
        """``{"status": "ok", key: [revision, ...]}``, with ``database_heads`` when read."""
        found: dict[str, Any] = {"status": "ok", self.key: [info.as_json() for info in self.revisions]}
        if self.database_heads is not None:
            found["database_heads"] = sorted(self.database_heads)
        return found


def current_listing(script: ScriptDirectory, heads: tuple[str, ...], check_heads: bool) -> RevisionListing:
    """As ``alembic current``: the revisions the database's ``heads`` name (Alembic's error when
    ``check_heads`` and they are not all the revision files' heads)."""
    if check_heads and set(heads) != set(script.get_heads()):
        raise DatabaseNotAtHead("Database is not on all head revisions")
    found = sorted(script.get_all_current(heads), key=lambda sc: sc.revision)
    return RevisionListing("current", tuple(RevisionInfo.of(sc) for sc in found), heads)


def heads_listing(script: ScriptDirectory, resolve_dependencies: bool) -> RevisionListing:
    """As ``alembic heads``: with ``resolve_dependencies``, a revision another depends on is no head."""
    found = script.get_revisions("heads") if resolve_dependencies else script.get_revisions(script.get_heads())
    return RevisionListing("heads", tuple(RevisionInfo.of(sc) for sc in found if sc is not None))


def history_range(rev_range: str | None) -> tuple[str | None, str | None]:
    """``[start]:[end]`` as Alembic's ``history`` splits it."""
    if rev_range is None:
        return None, None
    if ":" not in rev_range:
        raise CommandError("History range requires [start]:[end], [start]:, or :[end]")
    base, head = rev_range.strip().split(":")
    return base or None, head or None


def history_listing(
    script: ScriptDirectory, rev_range: str | None, heads: tuple[str, ...] | None, indicate_current: bool
) -> RevisionListing:
    """As ``alembic history``, newest first; ``current`` in the range is the database's ``heads``,
    and with ``indicate_current`` each revision says whether it is one of them."""
    base, head = history_range(rev_range)
    start: str | tuple[str, ...] = (heads or ()) if base == "current" else (base or "base")
    end: str | tuple[str, ...] = (heads or ()) if head == "current" else (head or "heads")
    found = script.walk_revisions(base=start, head=end)  # type: ignore[arg-type]  # as Alembic passes them
    current = (heads or ()) if indicate_current else None
    return RevisionListing("revisions", tuple(RevisionInfo.of(sc, current) for sc in found), heads)


def history_lines(
    script: ScriptDirectory, rev_range: str | None, heads: tuple[str, ...], verbose: bool, indicate_current: bool
) -> list[str]:
    """``alembic history``'s lines, formatted by Alembic, once the database's ``heads`` are read:
    ``current`` in the range stands for them and -i marks them, as Alembic's command does."""
    base, head = history_range(rev_range)
    start: str | tuple[str, ...] | None = heads if base == "current" and head != "current" else base
    end: str | tuple[str, ...] | None = heads if head == "current" else head
    lines = []
    for sc in script.walk_revisions(base=start or "base", head=end or "heads"):  # type: ignore[arg-type]  # as Alembic passes them
        if indicate_current:
            mark_current(sc, sc.revision in heads)
        lines.append(sc.cmd_format(verbose=verbose, include_branches=True, include_doc=True, include_parents=True))
    return lines


def show_lines(script: ScriptDirectory, rev: str | tuple[str, ...]) -> list[str]:
    """``alembic show``'s text: the log entry of each revision ``rev`` names (for ``show current``,
    the database's heads)."""
    return [sc.log_entry for sc in script.get_revisions(rev) if sc is not None]


def require_history_range(script: ScriptDirectory, rev_range: str | None) -> None:
    """Alembic's error for a ``history`` range that names an unknown revision, or (without
    ``current``, which only the database's heads resolve) one its walk refuses; nothing is read."""
    base, head = history_range(rev_range)
    if "current" not in (base, head):
        list(script.walk_revisions(base=base or "base", head=head or "heads"))
        return
    for named in (base, head):
        if named not in (None, "current") and not RELATIVE.search(named):
            script.get_revisions(named)


def needs_database(rev_range: str | None, indicate_current: bool) -> bool:
    """Whether ``history`` reads the database's heads (``current`` in the range, or -i)."""
    return indicate_current or "current" in history_range(rev_range)


def show_listing(script: ScriptDirectory, rev: str, heads: tuple[str, ...] | None) -> RevisionListing:
    """As ``alembic show``: the revisions ``rev`` names (``current``: the database's ``heads``)."""
    found = script.get_revisions(heads if rev == "current" and heads is not None else rev)
    return RevisionListing("revisions", tuple(RevisionInfo.of(sc) for sc in found if sc is not None), heads)


def current(config: Config, check_heads: bool, verbose: bool, as_json: bool) -> RevisionListing | None:
    """See :func:`.api.current`."""
    if not as_json:
        check_configured_url(config)
        alembic_read(alembic_command.current, config, check_heads=check_heads, verbose=verbose)
        return None
    heads = database_heads(config)
    with translated_errors():
        return current_listing(script_directory(config), heads, check_heads)


def heads(config: Config, verbose: bool, resolve_dependencies: bool, as_json: bool) -> RevisionListing | None:
    """See :func:`.api.heads`."""
    if not as_json:
        alembic_read(alembic_command.heads, config, verbose=verbose, resolve_dependencies=resolve_dependencies)
        return None
    with translated_errors():
        return heads_listing(script_directory(config), resolve_dependencies)


def history(
    config: Config, rev_range: str | None, verbose: bool, indicate_current: bool, as_json: bool
) -> RevisionListing | None:
    """See :func:`.api.history`: the range resolved before the database is read (an unknown
    revision is bad usage, in Alembic's words)."""
    script = script_directory(config)
    with alembic_words(script):
        read = needs_database(rev_range, indicate_current)
        require_history_range(script, rev_range)
        if not as_json and not read and not asbool(config.get_alembic_option("revision_environment")):
            print_stdout(config, history_lines(script, rev_range, (), verbose, indicate_current))
            return None
    heads = database_heads(config) if read or not as_json else None
    with translated_errors():
        if as_json:
            return history_listing(script, rev_range, heads, indicate_current)
        print_stdout(config, history_lines(script, rev_range, heads or (), verbose, indicate_current))
    return None


def show(config: Config, rev: str, as_json: bool) -> RevisionListing | None:
    """See :func:`.api.show`: a revision other than ``current`` resolved before anything else (an
    unknown one is bad usage, in Alembic's words); ``current`` is the database's heads."""
    script = script_directory(config)
    heads = database_heads(config) if rev == "current" else None
    with alembic_words(script) if heads is None else translated_errors():
        if as_json:
            return show_listing(script, rev, heads)
        print_stdout(config, show_lines(script, rev if heads is None else heads))
    return None


def edit(config: Config, rev: str) -> list[str]:
    """See :func:`.api.edit`."""
    script = script_directory(config)
    if rev == "current":
        heads = database_heads(config)
        if not heads:
            raise UsageError("No current revisions")
        paths = [path for head in heads for path in revision_files(script, head)]
    else:
        paths = revision_files(script, rev)
    open_in_editor(paths)
    return paths

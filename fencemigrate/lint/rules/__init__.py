"""The registry: every rule, in the order they are listed and run."""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import UsageError
from ..settings import ProjectSettings
from .base import CheckContext, Rule
from .code import (
    AutocommitBlock,
    Concurrently,
    EnumAddValue,
    ExplicitCommit,
    MissingDowngrade,
    NoTransactionStatement,
    TransactionControlSql,
)
from .database import (
    ChecksumDrift,
    DirtyRevision,
    FenceBelowLease,
    FenceSchemaAltered,
    FenceSchemaMissing,
    LedgerAboveFence,
    MissingAppliedRevision,
    ModelDrift,
    PendingRevision,
    UnexplainedToken,
    UnguardedVersionTable,
    UnrecordedVersionWrite,
)
from .files import (
    BadSuppression,
    DuplicateRevisionId,
    MissingDownRevision,
    MultipleHeads,
    RenumberedCopy,
    RenumberedSlug,
    RevisionCycle,
    UnparsableRevision,
)

RULES: tuple[Rule, ...] = (
    MultipleHeads(),
    MissingDownRevision(),
    DuplicateRevisionId(),
    RevisionCycle(),
    RenumberedCopy(),
    RenumberedSlug(),
    AutocommitBlock(),
    Concurrently(),
    ExplicitCommit(),
    TransactionControlSql(),
    NoTransactionStatement(),
    EnumAddValue(),
    MissingDowngrade(),
    PendingRevision(),
    ChecksumDrift(),
    MissingAppliedRevision(),
    FenceSchemaMissing(),
    FenceSchemaAltered(),
    DirtyRevision(),
    UnrecordedVersionWrite(),
    ModelDrift(),
    UnguardedVersionTable(),
    LedgerAboveFence(),
    FenceBelowLease(),
    UnexplainedToken(),
    UnparsableRevision(),
    BadSuppression(),
)

__all__ = ["RULES", "CheckContext", "Rule", "escalated_rules", "rule_for", "select_rules"]


def rule_for(key: str) -> Rule | None:
    """The rule whose id or name is ``key`` (any case)."""
    return next((rule for rule in RULES if rule.matches(key)), None)


def select_rules(select: str | Iterable[str] | None, ignore: str | Iterable[str] | None, db: bool) -> tuple[Rule, ...]:
    """The rules to run: ``select`` (default all) minus ``ignore``; database rules only with ``db``.

    Each is a list of rule ids or names, or one comma-separated string. An unknown rule, an
    empty list, or a database rule selected without ``db`` (``--no-db``) is a UsageError.
    """
    chosen = RULES if select is None else _resolve(select, "--select")
    dropped = () if ignore is None else _resolve(ignore, "--ignore")
    if not db and select is not None:
        needing = [rule.id for rule in chosen if rule.needs_database]
        if needing:
            raise UsageError(f"--select {','.join(needing)} needs the database, which --no-db leaves out")
    return tuple(rule for rule in RULES if rule in chosen and rule not in dropped and (db or not rule.needs_database))


def escalated_rules(settings: ProjectSettings) -> frozenset[str]:
    """The ids of the rules whose findings the project reports as errors (``errors`` of
    ``[tool.fencemigrate.check]``); an unknown rule there is a UsageError."""
    if not settings.errors:
        return frozenset()
    return frozenset(
        rule.id for rule in _resolve(settings.errors, f"`errors` of [tool.fencemigrate.check] in {settings.file}")
    )


def _resolve(value: str | Iterable[str], option: str) -> tuple[Rule, ...]:
    keys = [key.strip() for key in (value.split(",") if isinstance(value, str) else value)]
    keys = [key for key in keys if key]
    if not keys:
        raise UsageError(f"{option} names no rule")
    found: list[Rule] = []
    for key in keys:
        rule = rule_for(key)
        if rule is None:
            raise UsageError(f"unknown rule {key!r} in {option}; the rules are {', '.join(rule.id for rule in RULES)}")
        found.append(rule)
    return tuple(found)

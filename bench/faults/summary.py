"""The figures of a harness run: schedules run, faults injected per kind, violations per system.

A shard of a parallel run (``--jobs``) writes its :class:`Summary` as JSON (:meth:`Summary.to_json`);
:func:`merge` adds the shards up into the figures a serial run of the same schedules prints.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from faults.checker import PROPERTIES, Violation
from faults.execute import Result

SYSTEMS = ("fencemigrate", "control")
#: The control's examples kept (fencemigrate's are all kept).
CONTROL_EXAMPLES = 5

#: A line of the report about one schedule: its number (for the order across shards) and the text.
Entry = tuple[int, str]


@dataclass
class Summary:
    """Totals over every schedule of a run."""

    schedules: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    violations: dict[str, Counter[str]] = field(default_factory=lambda: {s: Counter() for s in SYSTEMS})
    broken_schedules: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[Entry]] = field(default_factory=lambda: defaultdict(list))
    notes: list[Entry] = field(default_factory=list)

    def add(self, backend: str, index: int, system: str, result: Result) -> None:
        """Count one schedule's result for one system."""
        if system == "fencemigrate":
            self.schedules[backend] += 1
        self.faults.update(result.injected)
        self.violations[system].update(v.prop for v in result.violations)
        if system == "fencemigrate":
            self.notes += [(index, f"{backend} #{index}: {note}") for note in result.notes]
        if result.violations:
            self.broken_schedules[system] += 1
        for violation in result.violations:
            if system == "fencemigrate" or len(self.examples[system]) < CONTROL_EXAMPLES:
                self.examples[system].append((index, f"{backend} #{index}: {violation.prop}: {violation.detail}"))

    def total(self, system: str) -> int:
        """Violations found for ``system``."""
        return sum(self.violations[system].values())

    def lines(self) -> list[str]:
        """The report, one line each."""
        total = sum(self.schedules.values())
        out = [
            f"schedules run: {total} ("
            + ", ".join(f"{name} {count}" for name, count in sorted(self.schedules.items()))
            + ")",
            "faults injected (both systems): "
            + (", ".join(f"{kind} {count}" for kind, count in sorted(self.faults.items())) or "none"),
        ]
        for system in SYSTEMS:
            per = ", ".join(f"{prop} {self.violations[system][prop]}" for prop in PROPERTIES)
            out.append(
                f"{system}: {self.total(system)} violations in {self.broken_schedules[system]}/{total} "
                f"schedules ({per})"
            )
            out += [f"  {example}" for _, example in self.examples[system]]
        out.append(
            f"fencemigrate, not a violation: {len(self.notes)} stale writes refused as usage (exit 2) "
            "instead of FENCED (exit 3)"
        )
        out += [f"  {note}" for _, note in self.notes[:5]]
        return out

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON data (a shard's result file)."""
        return {
            "schedules": dict(self.schedules),
            "faults": dict(self.faults),
            "violations": {system: dict(self.violations[system]) for system in SYSTEMS},
            "broken_schedules": dict(self.broken_schedules),
            "examples": {system: [list(entry) for entry in self.examples[system]] for system in SYSTEMS},
            "notes": [list(entry) for entry in self.notes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        """The inverse of :meth:`to_json`."""
        summary = cls(
            Counter(data["schedules"]),
            Counter(data["faults"]),
            {system: Counter(data["violations"][system]) for system in SYSTEMS},
            Counter(data["broken_schedules"]),
        )
        for system in SYSTEMS:
            summary.examples[system] = [(int(index), str(text)) for index, text in data["examples"][system]]
        summary.notes = [(int(index), str(text)) for index, text in data["notes"]]
        return summary


def merge(shards: list[Summary]) -> Summary:
    """The shards' summaries added up, as one run of all their schedules would have counted them.

    Examples and notes are put back in schedule order (each schedule belongs to one shard); the
    control keeps its first :data:`CONTROL_EXAMPLES`, as a serial run does.
    """
    merged = Summary()
    for shard in shards:
        merged.schedules.update(shard.schedules)
        merged.faults.update(shard.faults)
        for system in SYSTEMS:
            merged.violations[system].update(shard.violations[system])
            merged.examples[system] += shard.examples[system]
        merged.broken_schedules.update(shard.broken_schedules)
        merged.notes += shard.notes
    for system in SYSTEMS:
        merged.examples[system].sort(key=lambda entry: entry[0])
    del merged.examples["control"][CONTROL_EXAMPLES:]
    merged.notes.sort(key=lambda entry: entry[0])
    return merged


def verdict(summary: Summary) -> tuple[bool, str]:
    """Pass only when fencemigrate shows no violation and the control shows some."""
    if summary.total("fencemigrate"):
        return False, "FAIL: fencemigrate violated a property"
    if not summary.total("control"):
        return False, "FAIL: the control showed no violation: the schedules are not testing anything"
    return True, "ok: fencemigrate 0 violations, the control broken"


def describe(violations: list[Violation]) -> str:
    """One schedule's violations, for the progress line."""
    return ", ".join(sorted({v.prop for v in violations})) or "-"

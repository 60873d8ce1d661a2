"""The figures of a harness run: schedules run, faults injected per kind, violations per system."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from faults.checker import PROPERTIES, Violation
from faults.execute import Result

SYSTEMS = ("fencemigrate", "control")


@dataclass
class Summary:
    """Totals over every schedule of a run."""

    schedules: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    violations: dict[str, Counter[str]] = field(default_factory=lambda: {s: Counter() for s in SYSTEMS})
    broken_schedules: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    notes: list[str] = field(default_factory=list)

    def add(self, backend: str, index: int, system: str, result: Result) -> None:
        """Count one schedule's result for one system."""
        if system == "fencemigrate":
            self.schedules[backend] += 1
        self.faults.update(result.injected)
        self.violations[system].update(v.prop for v in result.violations)
        if system == "fencemigrate":
            self.notes += [f"{backend} #{index}: {note}" for note in result.notes]
        if result.violations:
            self.broken_schedules[system] += 1
        for violation in result.violations:
            if system == "fencemigrate" or len(self.examples[system]) < 5:
                self.examples[system].append(f"{backend} #{index}: {violation.prop}: {violation.detail}")

    def total(self, system: str) -> int:
        """Violations found for ``system``."""
        return sum(self.violations[system].values())

    def lines(self) -> list[str]:
        """The report, one line each."""
        total = sum(self.schedules.values())
        out = [f"schedules run: {total} ("
               + ", ".join(f"{name} {count}" for name, count in sorted(self.schedules.items())) + ")",
               "faults injected (both systems): "
               + (", ".join(f"{kind} {count}" for kind, count in sorted(self.faults.items())) or "none")]
        for system in SYSTEMS:
            per = ", ".join(f"{prop} {self.violations[system][prop]}" for prop in PROPERTIES)
            out.append(f"{system}: {self.total(system)} violations in {self.broken_schedules[system]}/{total} "
                       f"schedules ({per})")
            out += [f"  {example}" for example in self.examples[system]]
        out.append(f"fencemigrate, not a violation: {len(self.notes)} stale writes refused as usage (exit 2) "
                   "instead of FENCED (exit 3)")
        out += [f"  {note}" for note in self.notes[:5]]
        return out


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

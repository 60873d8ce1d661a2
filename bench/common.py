"""Helpers shared by the benchmarks: the machine line, and fresh databases on a server."""

from __future__ import annotations

import os
import platform
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def host_line() -> str:
    """CPU count and model, kernel and Python version: the start of a benchmark's machine line."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}, {cpu}), {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )


class FreshDatabases(ABC):
    """Creates fresh databases named ``fm_bench_<pid>_<n>`` and drops them (never timed)."""

    def __init__(self) -> None:
        self._count = 0
        self._live: set[str] = set()

    @abstractmethod
    def _create(self, name: str) -> None:
        """Create the empty database ``name``, dropping a leftover of that name first."""

    @abstractmethod
    def _drop(self, name: str) -> None:
        """Drop ``name`` if it exists (ending leftover sessions where the server can)."""

    def create(self) -> str:
        """Create a new empty database and return its name."""
        self._count += 1
        name = f"fm_bench_{os.getpid()}_{self._count}"
        self._create(name)
        self._live.add(name)
        return name

    def drop(self, name: str) -> None:
        """Drop ``name``."""
        self._drop(name)
        self._live.discard(name)

    def drop_all(self) -> None:
        """Drop every database this object created and has not dropped yet."""
        for name in sorted(self._live):
            try:
                self.drop(name)
            except Exception as error:  # noqa: BLE001 - a cleanup warning, the results stand
                print(f"warning: could not drop database {name}: {error}", file=sys.stderr)

    @contextmanager
    def fresh(self) -> Iterator[str]:
        """A fresh database for the duration of the block, dropped afterwards."""
        name = self.create()
        try:
            yield name
        finally:
            self.drop(name)

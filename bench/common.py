"""Helpers shared by the benchmarks that do not depend on a database server."""

from __future__ import annotations

import os
import platform
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

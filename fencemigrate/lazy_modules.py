"""Modules imported when first used, through importlib's own :class:`~importlib.util.LazyLoader`.

A command loads only the code it runs (:mod:`.command_modules`), and every deploy pays less for
starting (bench/README.md, "Startup").
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """Module ``name`` (absolute), its code run when one of its attributes is first read; the module
    itself when it is imported already."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def lazy_modules(package: str, *names: str) -> tuple[ModuleType, ...]:
    """The modules ``names`` of ``package`` (relative: "runtime.env_reads"), each lazy."""
    return tuple(lazy_module(f"{package}.{name}") for name in names)

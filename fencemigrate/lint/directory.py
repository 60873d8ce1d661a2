"""Find the revision files of a script directory the way Alembic does, without importing them."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from alembic.script import ScriptDirectory
from alembic.util import coerce_resource_to_filename

from .revision_file import RevisionFile, read_revision_file

# Alembic's own pattern for source revision files (sourceless .pyc files are not read).
_REVISION_FILE = re.compile(r"(?!\.\#|__init__)(.*\.py)$")


@dataclass(frozen=True)
class RevisionDirectory:
    """The revision files found, and the version locations they were looked for in (for messages)."""

    files: tuple[RevisionFile, ...]
    locations: tuple[str, ...]


def read_directory(script: ScriptDirectory) -> RevisionDirectory:
    """Every revision file in the version locations (recursively with ``recursive_version_locations``)."""
    if script.version_locations:
        locations = [coerce_resource_to_filename(location) for location in script.version_locations]
    else:
        locations = [Path(script.dir, "versions")]
    seen: set[Path] = set()
    files: list[RevisionFile] = []
    for location in locations:
        for path in _python_files(location, script.recursive_version_locations):
            real = path.resolve()
            if real not in seen:
                seen.add(real)
                files.append(read_revision_file(real, display_path(real)))
    return RevisionDirectory(tuple(files), tuple(display_path(location.resolve()) for location in locations))


def display_path(path: Path) -> str:
    """``path`` relative to the current directory when it is inside it (as CI annotations need)."""
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _python_files(location: Path, recursive: bool) -> list[Path]:
    if not location.is_dir():
        return []
    found: list[Path] = []
    for root, directories, names in os.walk(location):
        directories[:] = sorted(name for name in directories if name != "__pycache__") if recursive else []
        found += [Path(root, name) for name in sorted(names) if _REVISION_FILE.match(name)]
    return found

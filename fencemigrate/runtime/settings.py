"""What a fenced run writes under: token, holder, resource, fence schema."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FenceSettings:
    """The identity a fenced run claims the resource with."""

    token: int
    holder: str
    resource: str
    schema: str

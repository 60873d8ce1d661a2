"""What a fenced run writes under: holder, resource, fence schema, and the source of its token."""

from __future__ import annotations

from dataclasses import dataclass

from .run_token import TokenSource


@dataclass(frozen=True)
class FenceSettings:
    """The identity a fenced run claims the resource with."""

    holder: str
    resource: str
    schema: str
    tokens: TokenSource

    @property
    def token(self) -> int:
        """The token to write under (:meth:`TokenSource.required`)."""
        return self.tokens.required()

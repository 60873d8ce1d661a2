"""What a fenced run writes under: holder, resource, fence schema, the source of its token, and the
heads it requires when it claims."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .expected_heads import ExpectedHeads, ResolvedFrom
from .run_token import TokenSource


@dataclass(frozen=True)
class FenceSettings:
    """The identity a fenced run claims the resource with (and ``--expect-heads``, if given)."""

    holder: str
    resource: str
    schema: str
    tokens: TokenSource
    expected_heads: ExpectedHeads | None = None
    resolved_from: ResolvedFrom = field(default_factory=ResolvedFrom)

    @property
    def token(self) -> int:
        """The token to write under (:meth:`TokenSource.required`)."""
        return self.tokens.required()

    def require_expected_heads(self, heads: Iterable[str]) -> None:
        """FENCED unless ``heads`` (read in the claiming transaction) are the ones the run was told
        to expect (``--expect-heads``), and the ones its relative target was resolved from."""
        if self.expected_heads is not None:
            self.expected_heads.require(heads, self.resource, self.token)
        self.require_resolved_heads(heads)

    def require_resolved_heads(self, heads: Iterable[str]) -> None:
        """FENCED unless ``heads`` are the ones a target relative to the database's heads was
        resolved from (:class:`.ResolvedFrom`); nothing to check for any other target."""
        if self.resolved_from.heads is not None and self.tokens.token is not None:
            self.resolved_from.heads.require(heads, self.resource, self.tokens.token)

"""What a fenced run writes under: holder, resource, fence schema, the source of its token, and the
heads it requires when it claims."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .expected_heads import ExpectedHeads
from .run_token import TokenSource


@dataclass(frozen=True)
class FenceSettings:
    """The identity a fenced run claims the resource with (and ``--expect-heads``, if given)."""

    holder: str
    resource: str
    schema: str
    tokens: TokenSource
    expected_heads: ExpectedHeads | None = None

    @property
    def token(self) -> int:
        """The token to write under (:meth:`TokenSource.required`)."""
        return self.tokens.required()

    def require_expected_heads(self, heads: Iterable[str]) -> None:
        """FENCED unless ``heads`` (read in the claiming transaction) are the ones the run was told
        to expect; nothing to check without ``--expect-heads``."""
        if self.expected_heads is not None:
            self.expected_heads.require(heads, self.resource, self.token)

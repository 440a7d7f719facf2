"""How many pulls each tenant token is being served at once, against its cap.

A tenant token (a KV connector reading its own tenants' replicas) is served at most its cap of
pulls at once, so that tenant tokens cannot hold the connections the agents' own pulls need:
a pull past it is refused ``BUSY`` before its request is read. Tokens are numbered as the
agent's config lists them (:class:`~kvcast.serving.http.auth.KnownTokens`).
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_TENANT_PULLS = 4  # pulls a tenant token is served at once, unless set


class TenantPulls:
    def __init__(self, tokens: int, caps: Sequence[int] = ()) -> None:
        """``tokens`` tenant tokens, each capped at ``caps[i]`` (default
        :data:`DEFAULT_TENANT_PULLS` each)."""
        caps = tuple(caps) or (DEFAULT_TENANT_PULLS,) * tokens
        if len(caps) != tokens or min(caps, default=1) < 1:
            raise ValueError(f"tenant_pull_caps must give each tenant token a cap >= 1, "
                             f"got {list(caps)}")  # fmt: skip
        self.caps = caps
        self._held = [0] * tokens

    def take(self, token: int) -> bool:
        """One more pull for ``token``, if its cap allows (else False: refuse it)."""
        if self._held[token] >= self.caps[token]:
            return False
        self._held[token] += 1
        return True

    def give_back(self, token: int) -> None:
        """``token``'s pull has ended."""
        self._held[token] -= 1

    def held(self, token: int) -> int:
        """``token``'s pulls being served now."""
        return self._held[token]

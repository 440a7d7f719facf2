"""Sessions: inter-arrival state per session, and the rule that names a session.

A request's session is its explicit id when the trace has one. Otherwise it is inferred from
the prefix chain: walking from the root, the first block that has been followed by more than
one distinct child block within ``distinct_window_ms`` (this request's child included) ends the
shared system prompt, and the block right after it names the session. A chain in which no block
has branched is one conversation so far and is named by its root (so is a request that is only
one block long). Conversations extend their own chain turn after turn, so every turn of one
conversation gets the same name once its system prompt has been seen shared. The rule is causal:
the very first conversation is named by its root until a second one shows the root is shared.

Gaps: the second request sets the EWMA to the first gap and the variance to 0; later gaps
update ``ewma += a*d`` and ``var = (1-a)(var + a*d^2)`` with ``d = gap - ewma``. A session
unseen for ``horizon_ms`` starts afresh.
"""

from __future__ import annotations

from typing import Any

from kvcast.features.online.blocks import BlockTable, Run

NAN = float("nan")


def infer_session(
    blocks: BlockTable, ts: float, cover: list[tuple[Run, int, int]], hashes: tuple[int, ...]
) -> int | None:
    """The inferred session name of a request with ``hashes`` (see the module doc)."""
    if not hashes:
        return None
    pos = blocks.first_branch(ts, cover, hashes)
    if pos is None:
        return hashes[0]
    return hashes[pos + 1]


class SessionTable:
    """``key -> [last_ts, turns, gap_ewma, gap_var]``."""

    def __init__(self, alpha: float, horizon_ms: float, max_sessions: int | None = None) -> None:
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1 or None, got {max_sessions}")
        self.alpha = alpha
        self.horizon = horizon_ms
        self.max_sessions = max_sessions
        self.shed = 0  # sessions dropped by the cap (not by the horizon)
        self.sessions: dict[Any, list[float]] = {}

    def over_cap(self) -> bool:
        return self.max_sessions is not None and len(self.sessions) > self.max_sessions

    def observe(self, key: Any, ts: float) -> None:
        s = self.sessions.get(key)
        if s is None or s[0] + self.horizon <= ts:
            self.sessions[key] = [ts, 1.0, NAN, NAN]
            return
        gap = ts - s[0]
        if s[1] == 1.0:
            s[2] = gap
            s[3] = 0.0
        else:
            d = gap - s[2]
            inc = self.alpha * d
            s[2] += inc
            s[3] = (1.0 - self.alpha) * (s[3] + d * inc)
        s[0] = ts
        s[1] += 1.0

    def live(self, key: Any, now: float) -> list[float] | None:
        s = self.sessions.get(key)
        return s if s is not None and s[0] + self.horizon > now else None

    def sweep(self, now: float) -> None:
        """Drop sessions unseen for ``horizon``; over ``max_sessions``, also the least recently
        seen ones until 90% of the cap is left (a dropped session starts afresh)."""
        dead = [k for k, s in self.sessions.items() if s[0] + self.horizon <= now]
        for k in dead:
            del self.sessions[k]
        if self.over_cap():
            assert self.max_sessions is not None
            excess = len(self.sessions) - int(self.max_sessions * 0.9)
            oldest = sorted(self.sessions.items(), key=lambda kv: kv[1][0])[:excess]
            for k, _ in oldest:
                del self.sessions[k]
            self.shed += len(oldest)

    def __len__(self) -> int:
        return len(self.sessions)

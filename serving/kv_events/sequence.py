"""Per-publisher sequence tracking: in order, gap, or publisher restart.

vLLM numbers batches 0, 1, 2, ... from the engine process's start and carries no epoch, so a
restart is visible only as the sequence going back (to 0 or to anything at or below the last
one seen). A jump forward is a gap: the SUB socket dropped batches (high-water mark, reconnect),
which the replay socket may still hold. Pure logic, no sockets.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class SeqVerdict(Enum):
    FIRST = "first"  # first batch seen from this publisher: nothing to compare against
    NEXT = "next"  # exactly the successor of the last one
    GAP = "gap"  # jumped forward: batches [missing_from, missing_to) never arrived
    RESTART = "restart"  # went back: a new publisher process; [0, missing_to) never arrived


@dataclass(frozen=True, slots=True)
class SeqStep:
    verdict: SeqVerdict
    missing_from: int = 0
    missing_to: int = 0  # exclusive

    @property
    def missing(self) -> int:
        return self.missing_to - self.missing_from


class SeqTracker:
    """Remembers the last sequence number per publisher key (the topic frame)."""

    def __init__(self) -> None:
        self._last: dict[bytes, int] = {}

    def observe(self, key: bytes, seq: int) -> SeqStep:
        """Classify ``seq`` against the last one from ``key`` and make it the last one."""
        last = self._last.get(key)
        self._last[key] = seq
        if last is None:
            return SeqStep(SeqVerdict.FIRST)
        if seq == last + 1:
            return SeqStep(SeqVerdict.NEXT)
        if seq > last + 1:
            return SeqStep(SeqVerdict.GAP, last + 1, seq)
        return SeqStep(SeqVerdict.RESTART, 0, seq)

    def last(self, key: bytes) -> int | None:
        return self._last.get(key)

    def forget(self, key: bytes | None = None) -> None:
        """Drop what is known about ``key`` (all publishers when None)."""
        if key is None:
            self._last.clear()
        else:
            self._last.pop(key, None)

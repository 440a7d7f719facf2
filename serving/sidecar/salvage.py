"""What a full event queue must not forget: the removals among the events it drops.

The queue drops its oldest events when full (memory stays bounded). A dropped arrival or
store only leaves the state behind (a store is learnt again, or its block reads as not
resident); a dropped ``BlockRemoved`` or ``AllBlocksCleared`` would leave blocks resident in
the sidecar's view for ever, since nothing names them again. So, as events are dropped, their
removals are folded per node and medium (a clear supersedes the node's earlier removals) and
handed to the consumer ahead of the next batch: the older events, in their order, as far as
residency can tell. The fold is bounded too: past ``capacity`` hashes, a node's removals
become a clear of that node (its residency then under-reports until its engine stores again,
which costs a missed copy at worst, never a leak).
"""

from __future__ import annotations

from collections.abc import Iterable

from kvcast.features.events import AllBlocksCleared, BlockRemoved, Event


class RemovalSalvage:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._removed: dict[tuple[int, str], dict[int, None]] = {}  # (node, medium) -> hashes
        self._cleared: dict[int, float] = {}  # node -> the clear's time
        self._ts: dict[int, float] = {}  # node -> newest time folded
        self._size = 0
        self.salvaged = 0  # removal and clear events handed on although dropped
        self.cleared_for_space = 0  # nodes cleared because their removals overflowed

    def fold(self, dropped: Iterable[Event]) -> None:
        for ev in dropped:
            if isinstance(ev, BlockRemoved):
                held = self._removed.setdefault((ev.node, ev.medium), {})
                before = len(held)
                held.update(dict.fromkeys(ev.block_hashes))
                self._size += len(held) - before
            elif isinstance(ev, AllBlocksCleared):
                self._clear(ev.node, ev.ts_ms)
            else:
                continue
            self.salvaged += 1
            self._ts[ev.node] = max(self._ts.get(ev.node, ev.ts_ms), ev.ts_ms)
        while self._size > self.capacity:  # the node with the most removals: a clear
            (node, _), _ = max(self._removed.items(), key=lambda kv: len(kv[1]))
            self._clear(node, self._ts[node])
            self.cleared_for_space += 1

    def _clear(self, node: int, ts: float) -> None:
        for key in [k for k in self._removed if k[0] == node]:
            self._size -= len(self._removed.pop(key))
        self._cleared[node] = ts

    def take(self) -> list[Event]:
        """The folded events (clears first, then removals), and an empty fold."""
        if not self._cleared and not self._removed:
            return []
        out: list[Event] = [AllBlocksCleared(ts, n) for n, ts in self._cleared.items()]
        out += [BlockRemoved(self._ts[n], n, tuple(h), medium)
                for (n, medium), h in self._removed.items() if h]  # fmt: skip
        self._removed.clear()
        self._cleared.clear()
        self._ts.clear()
        self._size = 0
        return out

    def __len__(self) -> int:
        return self._size + len(self._cleared)

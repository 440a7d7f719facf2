"""Blocks on their way to each node by a reactive pull (Mooncake's conductor), and when each
lands: a request routed to a node that a pull is already filling with its prefix waits for
those blocks instead of pulling them again (a burst on one prefix moves it once)."""

from __future__ import annotations

from collections.abc import Callable, Iterable


class InflightPulls:
    def __init__(self, nodes: int) -> None:
        self._landing: list[dict[int, float]] = [{} for _ in range(nodes)]

    def split(
        self, node: int, wanted: Iterable[int], held: Callable[[int], bool], now: float
    ) -> tuple[list[int], int, float]:
        """Of a prefix ``wanted`` on ``node`` (only a consecutive one helps), the blocks to
        pull (``held`` by the source), how many are on their way there already (waited for,
        not pulled again) and when those land (``now`` for none); up to the first block
        neither."""
        moved: list[int] = []
        waited, ready_at = 0, now
        for b in wanted:
            lands = self.landing(node, b, now)
            if lands is not None:
                waited, ready_at = waited + 1, max(ready_at, lands)
            elif held(b):
                moved.append(b)
            else:
                break
        return moved, waited, ready_at

    def landing(self, node: int, block: int, now: float) -> float | None:
        """When ``block`` lands on ``node`` by a pull under way at ``now``; None if none is
        (one that landed is forgotten)."""
        on_its_way = self._landing[node]
        at = on_its_way.get(block)
        if at is not None and at <= now:
            del on_its_way[block]
            return None
        return at

    def note(self, node: int, blocks: Iterable[int], lands_at: float) -> None:
        """A pull of ``blocks`` to ``node`` lands at ``lands_at``."""
        self._landing[node].update(dict.fromkeys(blocks, lands_at))

    def landed(self, node: int, blocks: Iterable[int], now: float) -> None:
        """``blocks`` of a pull to ``node`` are in (forgotten: memory follows the pulls under
        way, not the trace), unless a later pull is bringing them again."""
        on_its_way = self._landing[node]
        for b in blocks:
            if on_its_way.get(b, float("inf")) <= now:
                del on_its_way[b]

    def __len__(self) -> int:
        return sum(map(len, self._landing))

"""Reactive pulls (Mooncake's conductor): a router may send a request to a node that lacks
part of its prefix and have that node pull the missing blocks from a holder before prefill.

:class:`ReactivePulls` books the pull a routing decision asks for: of the blocks the request's
node lacks, it waits for those already on their way there, pins on the source and puts on the
link those the source holds, up to the first block neither, and when the pull lands it unpins
them and copies into the node's HBM those the node lacks, if it has room for all of them.
:class:`InflightPulls` keeps the blocks on their way to each node and when each lands: a
request routed to a node that a pull is already filling with its prefix waits for those blocks
instead of pulling them again (a burst on one prefix moves it once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcast.simulator.block_pool import BlockPool
    from kvcast.simulator.network import Network
    from kvcast.simulator.policies.base import RoutingDecision


@dataclass(frozen=True, slots=True)
class Pull:
    """A reactive pull booked for one request, from node ``source`` to node ``target``: the
    blocks ``moved`` over the link (``nbytes``; pinned on the source until it lands), how many
    more of the prefix an earlier pull is already bringing (``waited``), and when they are all
    in (``ready_at``)."""

    source: int
    target: int
    moved: tuple[int, ...]
    waited: int
    ready_at: float
    nbytes: int

    @property
    def blocks(self) -> int:
        """The blocks of the prefix the request waits for, moved by this pull or an earlier
        one."""
        return len(self.moved) + self.waited


class ReactivePulls:
    """The reactive pulls of one cluster (``pools``, one per node, joined by ``network``):
    books each on the link and lands it; ``len`` counts the blocks on their way, all nodes."""

    def __init__(self, pools: Sequence[BlockPool], network: Network, block_bytes: int) -> None:
        self._pools = pools
        self._network = network
        self._block_bytes = block_bytes
        self.inflight = InflightPulls(len(pools))

    def book(
        self, d: RoutingDecision, blocks: Sequence[int], local: int, now: float
    ) -> Pull | None:
        """The pull that ``d`` asks for at ``now``, of a request's ``blocks`` whose node holds
        the first ``local`` in HBM, booked: its source's blocks pinned and reserved on the
        link. None when ``d`` asks for no pull (none, from its own node, or of no more than
        ``local`` blocks) or its first block is neither on its way nor held by the source:
        the request is ready at once."""
        if d.pull_from is None or d.pull_from == d.node or d.pull_blocks <= local:
            return None
        src = self._pools[d.pull_from]
        wanted = blocks[local : min(d.pull_blocks, len(blocks))]
        moved, waited, ready_at = self.inflight.split(d.node, wanted, src.in_hbm, now)
        nbytes = len(moved) * self._block_bytes
        if moved:
            src.pin(moved, now)
            done = self._network.reserve(d.pull_from, d.node, nbytes, now)
            self.inflight.note(d.node, moved, done)
            ready_at = max(ready_at, done)  # (its pins on the source go then too)
        if not (moved or waited):
            return None
        return Pull(d.pull_from, d.node, tuple(moved), waited, ready_at, nbytes)

    def landed(self, pull: Pull, now: float) -> None:
        """``pull`` is in at ``now``: forgotten, and its blocks unpinned on its source."""
        self.inflight.landed(pull.target, pull.moved, now)
        self._pools[pull.source].release(pull.moved)

    def place(self, pull: Pull, now: float) -> list[int]:
        """Copy the blocks of a landed ``pull`` that its target lacks into the target's HBM,
        as cached blocks, if it can make room for all of them; returns those placed (none
        when it cannot)."""
        target = self._pools[pull.target]
        fresh = [b for b in pull.moved if not target.in_hbm(b)]
        if fresh and target.make_room(len(fresh), now):
            target.add_active(fresh)
            target.release(fresh)
            return fresh
        return []

    def __len__(self) -> int:
        return len(self.inflight)


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

"""The hook through which a replication policy acts on the simulated cluster at any time.

A :class:`Replicator` is called every ``tick_ms`` of simulated time (not only when a request
arrives) with read access to the running :class:`~kvcast.simulator.engine.Simulator`, and
returns commands; the simulator executes them under the same physics as everything else:
transfers share links, replicas land as speculative blocks under each node's quota, a replica
never displaces an active block. To see the event stream (arrivals, block events, telemetry)
a replicator also registers itself as an observer (``observer_for(sim)``); one with an
``on_arrival(node, blocks, now_ms)`` method is told where the router sent each accepted
request, which is all the decider needs to learn whether the router uses its copies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from kvcast.predictor.commands import Command

if TYPE_CHECKING:
    from kvcast.simulator.engine import Simulator


class Replicator(Protocol):
    tick_ms: float
    speculative_quota_bytes: int

    def on_tick(self, now_ms: float, sim: Simulator) -> Iterable[Command]: ...

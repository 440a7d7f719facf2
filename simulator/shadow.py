"""Shadow mode in the simulator: a replicating policy decides on its tick and acts on nothing.

:class:`ShadowReplicator` wraps a :class:`~kvcast.simulator.replicating_policy.ReplicatingPolicy`:
the policy routes as usual and its decider runs on every tick over the same candidates,
probabilities and cluster view, but every command goes to ``sink`` instead of the cluster. The
cluster therefore evolves exactly as under the base router alone, which is what a shadow run
beside a live router measures. ``kvcast simulate --shadow-log FILE`` writes the sink's
decisions with the sidecar's own decision log (the format ``kvcast shadow-eval`` reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.commands import Command
from kvcast.simulator.replicating_policy import ReplicatingPolicy

if TYPE_CHECKING:
    from kvcast.features.events import Event
    from kvcast.simulator.engine import Simulator

Sink = Callable[[float, int, list[Command], ChainCandidates, np.ndarray], None]
"""Called once per tick with ``(now_ms, tick, commands, candidates, probabilities)``."""


class ShadowReplicator:
    """Runs ``policy``'s decider on its tick, hands every command to ``sink``, executes none."""

    def __init__(self, policy: ReplicatingPolicy, sink: Sink) -> None:
        self.policy = policy
        self.sink = sink
        self.tick_ms = policy.tick_ms
        self.speculative_quota_bytes = policy.speculative_quota_bytes
        self.ticks = 0
        self.decisions = 0

    def observer_for(self, sim: Simulator) -> Callable[[Event], None] | None:
        return self.policy.observer_for(sim)

    def on_tick(self, now_ms: float, sim: Simulator) -> Iterable[Command]:
        commands = list(self.policy.on_tick(now_ms, sim))
        cands, probs = self.policy.inner.last_scored
        self.sink(now_ms, self.ticks, commands, cands, probs)
        self.ticks += 1
        self.decisions += len(commands)
        return []

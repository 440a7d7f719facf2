"""A replication policy in the simulator: a base router plus the decider on its own tick.

:class:`DeciderReplicator` is the :class:`~kvcast.simulator.replication.Replicator` half: on
every tick it collects candidate chains, gets a probability per block (``probabilities``,
from a scorer or the oracle's knowledge), snapshots the cluster
(:class:`~kvcast.simulator.cluster_adapter.SimulatorView`) and returns the decider's commands.

:class:`ReplicatingPolicy` is what the routing registry holds under names such as ``oracle``:
it routes with the base router named in the decider config (``loop.router``, default
``dynamo_kv``), which sees speculative replicas like any cached block, and carries its
replicator as ``.replicator`` so that a simulator built by name runs it. When the run starts
(first tick) the base router is rebuilt with the simulator's own routing parameters and the
decider starts from an empty ledger, so one policy object may serve several runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.commands import Command
from kvcast.predictor.decider import Decider
from kvcast.predictor.decider_config import GIB, DeciderConfig
from kvcast.predictor.outcome_feedback import FATES
from kvcast.simulator.cluster_adapter import SimulatorView
from kvcast.simulator.policies.base import RoutingContext, RoutingDecision, RoutingPolicy
from kvcast.simulator.policies.registry import create_policy, policy_names, policy_spec

if TYPE_CHECKING:
    from kvcast.features.events import Event
    from kvcast.simulator.engine import Simulator


PULLING_ROUTERS = frozenset({"mooncake_conductor"})
"""Base routers that pull a missing prefix on the request's critical path."""


class DeciderReplicator:
    """Candidates -> probabilities -> decider -> commands, every ``loop.tick_ms``."""

    def __init__(self, cfg: DeciderConfig) -> None:
        self.cfg = cfg
        self.reactive_pull = cfg.loop.router in PULLING_ROUTERS
        self.tick_ms = cfg.loop.tick_ms
        self.speculative_quota_bytes = int(cfg.budgets.speculative_quota_gib * GIB)
        self.decider = Decider(cfg)
        self._view: SimulatorView | None = None
        self.last_scored: tuple[ChainCandidates, np.ndarray] = (
            ChainCandidates.build([]),
            np.zeros(0),
        )

    def start(self, sim: Simulator) -> None:
        """A new run: fresh ledger, fresh cluster adapter with its own probe router."""
        self.decider = Decider(self.cfg)
        probe = create_policy(
            self.cfg.loop.router, sim.cfg.routing, num_nodes=sim.cfg.nodes, seed=sim.cfg.seed
        )
        self._view = SimulatorView(sim, reactive_pull=self.reactive_pull, probe_router=probe)

    def observer_for(self, sim: Simulator) -> Callable[[Event], None] | None:
        """What to feed with the run's event stream (None: this replicator needs none)."""
        return None

    def on_arrival(self, node: int, blocks: Sequence[int], now_ms: float) -> None:
        """Where the router sent a request: the decider learns whether its copies are used."""
        self.decider.observe_arrival(node, blocks, now_ms)

    def copy_fates(self) -> dict[str, int]:
        """What became of the run's replications so far, by fate (``FATES``; ``unsettled``:
        still alive, their request not come yet)."""
        fb = self.decider.feedback
        return {**{f: fb.fates[f] for f in FATES}, "unsettled": len(fb)}

    def on_tick(self, now_ms: float, sim: Simulator) -> Iterable[Command]:
        if self._view is None or self._view.sim is not sim:
            self.start(sim)
        assert self._view is not None
        for n, node in enumerate(sim.nodes):  # copies evicted for room: forgotten now
            lost = node.pool.spec_evicted
            if lost:
                self.decider.forget(n, lost)
                lost.clear()
        cands = self.candidates(now_ms, sim)
        probs = self.probabilities(now_ms, cands, sim) if len(cands) else np.zeros(0)
        self.last_scored = (cands, probs)  # what this tick decided from (the shadow log's)
        return self.decider.decide(cands, probs, self._view.view())

    def candidates(self, now_ms: float, sim: Simulator) -> ChainCandidates:
        raise NotImplementedError

    def probabilities(self, now_ms: float, cands: ChainCandidates, sim: Simulator) -> np.ndarray:
        raise NotImplementedError


def base_routers() -> list[str]:
    """The registered routers a replicating policy may route with (not the replicating
    policies themselves), sorted."""
    return [n for n in policy_names() if not issubclass(policy_spec(n).cls, ReplicatingPolicy)]


def check_base_router(params: DeciderConfig, source: str = "decider config") -> None:
    """A ValueError naming ``source`` and the key unless ``loop.router`` is a base router."""
    name, valid = params.loop.router, base_routers()
    if name not in valid:
        what = "a replicating policy, not a router" if name in policy_names() else "unknown"
        raise ValueError(f"{source}: key 'loop.router': {name!r} is {what}; valid: "
                         f"{', '.join(valid)}")  # fmt: skip


class ReplicatingPolicy:
    """Base router + replicator under one policy name (subclasses are registered)."""

    name: str

    def __init__(self, params: DeciderConfig, *, num_nodes: int, seed: int) -> None:
        self.params = params
        self._num_nodes = num_nodes
        self._seed = seed
        check_base_router(params)
        self.router: RoutingPolicy = create_policy(
            params.loop.router, None, num_nodes=num_nodes, seed=seed
        )
        self.inner = self.make_replicator(params)
        self.tick_ms = self.inner.tick_ms
        self.speculative_quota_bytes = self.inner.speculative_quota_bytes
        self._sim: Simulator | None = None

    def make_replicator(self, params: DeciderConfig) -> DeciderReplicator:
        raise NotImplementedError

    @property
    def replicator(self) -> ReplicatingPolicy:
        return self

    def observer_for(self, sim: Simulator) -> Callable[[Event], None] | None:
        """Called by the simulator when it is built, before any event: the replicator's
        event consumer for that run, if it has one."""
        return self.inner.observer_for(sim)

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        return self.router.route(ctx)

    def on_arrival(self, node: int, blocks: Sequence[int], now_ms: float) -> None:
        self.inner.on_arrival(node, blocks, now_ms)

    def copy_fates(self) -> dict[str, int]:
        return self.inner.copy_fates()

    @property
    def base_router(self) -> str:
        """The anchor router this policy routes with (summary key ``base_router``)."""
        return self.params.loop.router

    def on_tick(self, now_ms: float, sim: Simulator) -> Iterable[Command]:
        if self._sim is not sim:
            self._sim = sim
            self.router = create_policy(
                self.params.loop.router,
                sim.cfg.routing,
                num_nodes=self._num_nodes,
                seed=self._seed,
            )
            self.inner.start(sim)
        return self.inner.on_tick(now_ms, sim)

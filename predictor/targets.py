"""Predicted load per node, from the same probabilities the decider acts on.

Each candidate chain's request, if it comes, lands on its *home* (the node holding the longest
prefix; when several hold it equally, the router spreads such requests, so the work is split
between them) and brings its uncached prefill there. A node's predicted queue is its current
queue plus ``load_weight x`` the work expected within ``horizon_ms`` (the chain's probability
times, for a known first use, whether it falls within the horizon, else the horizon's share
of the window); a node whose predicted queue reaches ``hot_queue_ms`` is *hot* and never
receives a replica (it would only attract more work to a node that is about to be busy).
When the decider moves a chain, the chain's expected work moves with it, so that the next
decision sees the new picture and replicas do not all pile onto the one idle node.
"""

from __future__ import annotations

import numpy as np

from kvcast.predictor.chains import ChainPlan
from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.decider_config import TargetConfig


class LoadForecast:
    def __init__(
        self, view: ClusterView, plans: list[ChainPlan], cfg: TargetConfig, window_ms: float
    ) -> None:
        self.cfg = cfg
        self.view = view
        self.work = np.zeros(view.n)
        self.homes: dict[int, list[int]] = {}
        self.weights: dict[int, float] = {}
        share = min(cfg.horizon_ms / window_ms, 1.0)
        for plan in plans:
            if plan.known_first_use:
                w = plan.p_request if plan.time_left_ms <= cfg.horizon_ms else 0.0
            else:
                w = plan.p_request * share
            if w <= 0.0:
                continue
            depth = max(plan.held)
            homes = [i for i, h in enumerate(plan.held) if h == depth]
            self.homes[plan.index] = homes
            self.weights[plan.index] = w
            for home in homes:
                self.work[home] += w * plan.work_ms(view, home) / len(homes)

    @property
    def queue_ms(self) -> np.ndarray:
        """Predicted queue per node (ms)."""
        return self.view.queue_ms + self.cfg.load_weight * self.work

    def queue_without(self, plan: ChainPlan) -> np.ndarray:
        """Predicted queue per node, leaving out the chain's own request (it does not wait
        behind itself)."""
        q = self.queue_ms
        homes = self.homes.get(plan.index)
        if homes:
            w = self.cfg.load_weight * self.weights[plan.index]
            for home in homes:
                q[home] -= w * plan.work_ms(self.view, home) / len(homes)
        return q

    def hot(self) -> np.ndarray:
        return self.queue_ms >= self.cfg.hot_queue_ms

    def move(self, plan: ChainPlan, target: int) -> None:
        """The chain's request is now expected on ``target`` (after a replica lands there)."""
        homes = self.homes.get(plan.index)
        if homes is None or homes == [target]:
            return
        view, w = self.view, self.weights[plan.index]
        for home in homes:
            self.work[home] -= w * plan.work_ms(view, home) / len(homes)
        self.work[target] += w * plan.work_ms(view, target)
        self.homes[plan.index] = [target]

    def holder_queue(self, held: list[int], depth: int, queue: np.ndarray) -> float:
        """The best predicted queue among nodes already holding ``depth`` blocks (inf: none)."""
        best = np.inf
        for i, h in enumerate(held):
            if h >= depth and queue[i] < best:
                best = float(queue[i])
        return best

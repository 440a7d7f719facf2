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

from kvcast.predictor.chains import ChainPlan, PlanBatch
from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.decider_config import TargetConfig


class LoadForecast:
    def __init__(
        self, view: ClusterView, plans: PlanBatch, cfg: TargetConfig, window_ms: float
    ) -> None:
        self.cfg = cfg
        self.view = view
        share = min(cfg.horizon_ms / window_ms, 1.0)
        p = plans.p_request
        within = plans.time_left_ms <= cfg.horizon_ms
        w = np.where(plans.known, np.where(within, p, 0.0), p * share)
        held, depth = plans.held, plans.depth
        homes = held == depth[:, None]  # [P, n] the nodes holding the deepest prefix
        bt, pf = view.block_tokens, view.prefill
        start = (depth * bt).astype(float)
        end = (plans.lens * bt + plans.tail_tokens).astype(float)
        span = pf.b_ms_per_token * (end - start) + pf.c_ms_per_token2 * (end**2 - start**2)
        work = pf.a_ms + np.where(end > start, span, 0.0)
        each = w * work / homes.sum(axis=1)  # what the request brings to each of its homes
        go = w > 0.0
        # plan by plan, in order (accumulate adds in sequence, as one update per plan would)
        added = np.where(homes & go[:, None], each[:, None], 0.0)
        self.work = np.add.accumulate(added, axis=0)[-1] if len(added) else np.zeros(view.n)
        rows = np.flatnonzero(go)
        index = plans.index[rows].tolist()
        self.weights: dict[int, float] = dict(zip(index, w[rows].tolist(), strict=True))
        self._row = dict(zip(index, rows.tolist(), strict=True))  # chain -> row of ``homes``
        self._home_mask = homes
        self.homes: dict[int, list[int]] = {}  # filled as plans are looked at or moved
        self._q: np.ndarray | None = None  # the predicted queue (None: stale)
        self._hot: np.ndarray | None = None

    def _homes_of(self, plan: ChainPlan) -> list[int] | None:
        homes = self.homes.get(plan.index)
        if homes is None and plan.index in self._row:
            mask = self._home_mask[self._row[plan.index]]
            homes = self.homes[plan.index] = np.flatnonzero(mask).tolist()
        return homes

    @property
    def queue_ms(self) -> np.ndarray:
        """Predicted queue per node (ms); a new array."""
        return self._queue().copy()

    def _queue(self) -> np.ndarray:
        if self._q is None:
            self._q = self.view.queue_ms + self.cfg.load_weight * self.work
        return self._q

    def queue_without(self, plan: ChainPlan) -> np.ndarray:
        """Predicted queue per node, leaving out the chain's own request (it does not wait
        behind itself)."""
        q = self._queue().copy()
        homes = self._homes_of(plan)
        if homes:
            w = self.cfg.load_weight * self.weights[plan.index]
            for home in homes:
                q[home] -= w * plan.work_ms(self.view, home) / len(homes)
        return q

    def hot(self) -> np.ndarray:
        """Nodes predicted hot (read only: the same array until a chain moves)."""
        if self._hot is None:
            self._hot = self._queue() >= self.cfg.hot_queue_ms
        return self._hot

    def move(self, plan: ChainPlan, target: int) -> None:
        """The chain's request is now expected on ``target`` (after a replica lands there)."""
        homes = self._homes_of(plan)
        if homes is None or homes == [target]:
            return
        view, w = self.view, self.weights[plan.index]
        for home in homes:
            self.work[home] -= w * plan.work_ms(view, home) / len(homes)
        self.work[target] += w * plan.work_ms(view, target)
        self.homes[plan.index] = [target]
        self._q = self._hot = None

    def holder_queue(self, held: list[int], depth: int, queue: np.ndarray) -> float:
        """The best predicted queue among nodes already holding ``depth`` blocks (inf: none)."""
        best = np.inf
        for i, h in enumerate(held):
            if h >= depth and queue[i] < best:
                best = float(queue[i])
        return best

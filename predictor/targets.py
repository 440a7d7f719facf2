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

The starting work is summed over every chain at once in numpy; from then on the per-node
state (work, predicted queue, hot nodes) is a few plain Python lists, updated in place chain
by chain (cheaper than numpy on vectors as short as a cluster's node count).
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
        span = pf.spans_ms(start, end)
        work = pf.a_ms + np.where(end > start, span, 0.0)
        each = w * work / homes.sum(axis=1)  # what the request brings to each of its homes
        go = w > 0.0
        # plan by plan, in order (accumulate adds in sequence, as one update per plan would)
        added = np.where(homes & go[:, None], each[:, None], 0.0)
        total = np.add.accumulate(added, axis=0)[-1] if len(added) else np.zeros(view.n)
        self.work: list[float] = total.tolist()  # [n] expected work per node (ms)
        # chain -> its row of ``plans`` if its request is expected (w > 0), else -1
        self._row = np.full(len(plans.cands), -1)
        self._row[plans.index[go]] = np.flatnonzero(go)
        self._w = w
        self._work = work  # [P] the request's work on each of its homes
        self._home_mask = homes
        self.homes: dict[int, list[int]] = {}  # filled as plans are looked at or moved
        self._base: list[float] = np.asarray(view.queue_ms).tolist()  # [n] queues now
        self._q: list[float] | None = None  # the predicted queue (None: stale)
        self._hot: list[bool] | None = None
        # chain -> (its prefixes, queue_without for them), until a chain moves
        self._without: dict[int, tuple[list[int], list[float]]] = {}

    def _homes_of(self, plan: ChainPlan) -> list[int] | None:
        """The nodes the chain's request is expected on (None: none, it is not expected)."""
        homes = self.homes.get(plan.index)
        if homes is None:
            row = self._row.item(plan.index)
            if row >= 0:
                mask = self._home_mask[row].tolist()
                homes = self.homes[plan.index] = [node for node, home in enumerate(mask) if home]
        return homes

    def weight(self, plan: ChainPlan) -> float:
        """The chain's expected request count within the horizon (0: not expected)."""
        row = self._row.item(plan.index)
        return self._w.item(row) if row >= 0 else 0.0

    @property
    def queue_ms(self) -> np.ndarray:
        """Predicted queue per node (ms); a new array."""
        return np.array(self._queue())

    def _queue(self) -> list[float]:
        if self._q is None:
            lw = self.cfg.load_weight
            self._q = [q + lw * w for q, w in zip(self._base, self.work, strict=True)]
        return self._q

    def queue_without(self, plan: ChainPlan) -> list[float]:
        """Predicted queue per node, leaving out the chain's own request (it does not wait
        behind itself). Read only: the same list until a chain moves or its prefixes change."""
        kept = self._without.get(plan.index)
        if kept is not None and kept[0] == plan.held:
            return kept[1]
        q = self._queue().copy()
        homes = self._homes_of(plan)
        if homes:
            w = self.cfg.load_weight * self.weight(plan)
            for home in homes:
                q[home] -= w * plan.work_ms(self.view, home) / len(homes)
        self._without[plan.index] = (plan.held.copy(), q)
        return q

    def queues_without(self, rows: np.ndarray) -> np.ndarray:
        """``[len(rows), n]``: :meth:`queue_without` of the chains at ``rows``, all at once: the
        same arithmetic, term by term and in the same order, so the same values (the decider's
        screens rely on it). Their homes are the plans' as built: exact for every chain not
        moved since, which is every chain a tick has yet to weigh (the queues are now's)."""
        homes = self._home_mask[rows]
        w = self.cfg.load_weight * self._w[rows]
        own = np.where(w > 0.0, w * self._work[rows] / homes.sum(axis=1), 0.0)
        return np.asarray(self._queue()) - np.where(homes, own[:, None], 0.0)

    def hot(self) -> list[bool]:
        """Nodes predicted hot (read only: the same list until a chain moves)."""
        if self._hot is None:
            hot_ms = self.cfg.hot_queue_ms
            self._hot = [q >= hot_ms for q in self._queue()]
        return self._hot

    def move(self, plan: ChainPlan, target: int) -> None:
        """The chain's request is now expected on ``target`` (after a replica lands there)."""
        homes = self._homes_of(plan)
        if homes is None or homes == [target]:
            return
        view, w, work = self.view, self.weight(plan), self.work
        for home in homes:
            work[home] -= w * plan.work_ms(view, home) / len(homes)
        work[target] += w * plan.work_ms(view, target)
        self.homes[plan.index] = [target]
        self._q = self._hot = None
        self._without.clear()

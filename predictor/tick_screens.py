"""The decider's tick screens: which chains a tick need not weigh one by one.

As a tick starts, :class:`~kvcast.predictor.decider.Decider` rules out the chains it could not
copy: no held prefix, a live replica, no holder queued above the least queued node
(:meth:`TickScreens._may_copy`), no target and cut whose net value could pay, told before
their copy terms are made (:meth:`TickScreens._may_pay`, :mod:`kvcast.predictor.unpaid_screen`)
or after (:meth:`TickScreens._cannot_pay`, :func:`~kvcast.predictor.costs.cannot_pay`). Each
is exact: it rules out only chains that weighing one by one would not copy. What rules a chain
out changes only with the tick's own commands (queues, hot nodes, bytes in flight, copies on
their way), so after a command the screens are made again with the state the commands left
(:meth:`TickScreens._screens_again`), when enough ruled-out chains are left to pay for the
pass (:attr:`TickScreens.RESCREEN_AT`); else those are weighed one by one. Either way the
commands are the same (``tests/predictor/test_decider_properties.py`` checks them against
weighing every chain)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvcast.predictor.budgets import BudgetLedger
from kvcast.predictor.chains import ChainPlan, PlanBatch
from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.copy_terms import CopyTerms, TickTerms
from kvcast.predictor.costs import cannot_pay
from kvcast.predictor.decider_config import GIB, DeciderConfig
from kvcast.predictor.targets import LoadForecast
from kvcast.predictor.unpaid_screen import screens, surely_unpaid


class ScreenInputs(NamedTuple):
    """What a tick's screens read besides the decider's own state: the plans and the tick's
    order of them (``order``, their ``chains``), the view, the load forecast, the outcome
    factor, and the chains batched as the tick started (their plans ``firsts`` and copy
    terms ``copies``) with the tick's terms."""

    plans: PlanBatch
    order: np.ndarray
    chains: list[tuple[int, ...]]
    view: ClusterView
    forecast: LoadForecast
    factor: float
    firsts: list[ChainPlan]
    copies: CopyTerms | None
    terms: TickTerms


class TickScreens:
    """The screens, as methods of the decider (a test decider overrides them to weigh every
    chain); they read its ``ledger`` and ``cfg``."""

    ledger: BudgetLedger
    cfg: DeciderConfig

    # A tick's screens are made again after a command when at least this many of the chains
    # left were ruled out by the last ones (else those are weighed one by one). A cost ratio,
    # not a rule: the commands are the same either way (the screens only skip chains that
    # could not be copied). Measured on bench_sidecar.py's state (8 nodes, 16 chains a tick),
    # a screen costs ~50 us, and a chain it rules out mostly leaves the one-by-one weighing
    # early: screened again after every command, the decider's p99 fell from 1.1 to 0.9 ms
    # where a tick made one command and rose from 1.4 to 1.6 ms where it made eight; from
    # eight chains left, it falls in the first case and holds in the second.
    RESCREEN_AT = 8

    def _screens_again(
        self, tick: ScreenInputs, batched: list[int], row: dict[int, int]
    ) -> list[bool]:
        """:func:`admitted_chains` of the tick's chains with the screens made again now
        (``batched``: the chains with rows ``row`` of the tick's copy terms)."""
        plans, order, chains, view = tick.plans, tick.order, tick.chains, tick.view
        queues = tick.forecast.queues_without(order)
        may = self._may_copy(plans, order, chains, queues)
        if may:
            may = self._may_pay(plans, order, may, chains, queues, view, tick.factor)
        unpaid = self._cannot_pay(
            queues[batched], tick.firsts, tick.copies, view, tick.forecast, tick.terms
        )
        return admitted_chains(len(order), may, row, unpaid)

    def _touched(self, blocks: tuple[int, ...]) -> bool:
        """Whether some block of the chain ``blocks`` is on its way somewhere."""
        pending = self.ledger.pending
        return bool(pending) and any(map(pending.__contains__, blocks))

    def _may_copy(
        self,
        plans: PlanBatch,
        rows: np.ndarray,
        chains: list[tuple[int, ...]],
        queue: np.ndarray,
    ) -> list[int]:
        """Which of the ``chains`` (``rows`` of ``plans``, ``queue`` their
        :meth:`~LoadForecast.queues_without`) :meth:`Decider._best_option` could weigh
        copying as the tick starts: every chain with a copy on its way (its placement is read
        then), else those with a held prefix, no live replica and worth a look
        (:meth:`Decider._worth_a_look` over every chain at once; a chain it lets through is
        still checked one by one). What rules a chain out here only changes with the tick's
        own commands (a replica is never dropped within a tick)."""
        depth = plans.depth[rows]
        most = np.where(plans.held[rows] >= depth[:, None], queue, -np.inf).max(axis=1)
        with np.errstate(invalid="ignore"):
            looks = ~(most <= queue.min(axis=1)) & (depth > 0)  # NaN: let the check decide
        has_replica, touched = self.ledger.has_replica, self._touched
        return [
            i
            for i, (blocks, d, look) in enumerate(
                zip(chains, depth.tolist(), looks.tolist(), strict=True)
            )
            if touched(blocks) or (look and not has_replica(blocks[d - 1]))
        ]

    def _may_pay(
        self,
        plans: PlanBatch,
        rows: np.ndarray,
        batched: list[int],
        chains: list[tuple[int, ...]],
        queue: np.ndarray,
        view: ClusterView,
        factor: float,
    ) -> list[int]:
        """Those of ``batched`` (indices into ``rows`` of ``plans``, ``chains`` and ``queue``)
        that :func:`~kvcast.predictor.unpaid_screen.surely_unpaid` does not rule out before
        their copy terms are made; a chain with a copy on its way is kept (its placement is
        read then). Like :meth:`_cannot_pay`'s, a verdict holds until a command of the tick
        moves something."""
        if not screens(view):
            return batched
        at = np.array(batched)
        unpaid = surely_unpaid(plans, rows[at], queue[at], view, self.cfg, factor)
        if not any(unpaid):
            return batched
        touched = self._touched
        return [i for i, no in zip(batched, unpaid, strict=True) if not no or touched(chains[i])]

    def _cannot_pay(
        self,
        queues: np.ndarray,
        weighed: list[ChainPlan],
        copies: CopyTerms | None,
        view: ClusterView,
        forecast: LoadForecast,
        terms: TickTerms,
    ) -> list[bool]:
        """Per chain ``weighed`` (``queues``: their :meth:`~LoadForecast.queues_without`, as
        :meth:`Decider.decide` read them for every chain at once, each row its own
        arithmetic; ``copies``: their copy terms), whether :meth:`Decider._best_option` would
        find no copy worth making as the tick starts
        (:func:`~kvcast.predictor.costs.cannot_pay`, an upper bound of its net value over
        every chain at once). A chain with a copy on its way is left to its own check (its
        placement is read then). What rules a chain out here only changes with the tick's own
        commands (queues, hot nodes, bytes in flight). With a router probe nothing is ruled
        out: the probe may keep state (the simulator's routers break ties with a seeded RNG),
        so each of its calls is made as the chain-by-chain check makes it."""
        if copies is None or view.would_route is not None:  # a probe's calls are all made
            return [False] * len(weighed)
        margin = self.cfg.costs.safety_margin_gib * GIB
        in_flight, hot = self.ledger.in_flight_to(view.n), forecast.hot()
        free, room, _ = terms.memory(in_flight, hot, view.block_bytes, margin)
        unpaid = cannot_pay(copies, queues, view, self.cfg, terms, free, room)
        touched = self._touched
        return [no and not touched(p.blocks) for no, p in zip(unpaid, weighed, strict=True)]


def admitted_chains(k: int, may: list[int], row: dict[int, int], unpaid: list[bool]) -> list[bool]:
    """Per chain of a tick's ``k``, whether its screens let it be weighed: among ``may``
    (:meth:`TickScreens._may_copy` then :meth:`TickScreens._may_pay`), and not ruled out by
    :meth:`TickScreens._cannot_pay` (``unpaid``, per row of the batched copy terms ``row``; a
    chain without a row is weighed with its own terms)."""
    out = [False] * k
    for i in may:
        j = row.get(i)
        out[i] = j is None or not unpaid[j]
    return out

"""The screen before the copy terms (:func:`~kvcast.predictor.unpaid_screen.surely_unpaid`)
never rules out a chain that :func:`~kvcast.predictor.costs.cannot_pay`, weighing every
target and cut on the chain's copy terms, would let through; and where nodes evict faster
than a copy waits for its use, it rules every chain out without their copy terms, for the
same commands."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from decider_views import GBPS_100, decider_cfg, one_chain, view
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decider_properties import Case, EveryChain, cases

from kvcast.predictor.chains import build_plans
from kvcast.predictor.cluster_view import ChainCandidates, ClusterView, PrefillCost
from kvcast.predictor.copy_terms import TickTerms
from kvcast.predictor.costs import cannot_pay
from kvcast.predictor.decider import Decider
from kvcast.predictor.decider_config import GIB
from kvcast.predictor.targets import LoadForecast
from kvcast.predictor.unpaid_screen import MAX_BLOCK_BYTES, screens, surely_unpaid

RATES = (None, 0.0, 1e-4, 0.01, 0.1, 1.0, 50.0)  # blocks evicted per ms, per node


def both_verdicts(case: Case, probs: np.ndarray, factor: float) -> tuple[list[bool], list[bool]]:
    """Per chain the decider weighs (untouched: no copy on its way), the screen's verdict and
    ``cannot_pay``'s on its copy terms, as a tick starts."""
    cfg, view = case.cfg, case.view
    plans = build_plans(case.cands, probs, view, {}, window_ms=cfg.window_ms, min_p=0.0)
    rows = np.arange(len(plans))
    forecast = LoadForecast(view, plans, cfg.targets, cfg.window_ms)
    queues = forecast.queues_without(rows)
    screen = surely_unpaid(plans, rows, queues, view, cfg, factor)
    terms = TickTerms.of(view, cfg, factor)
    ct = Decider(cfg)._copy_terms(plans, rows, plans.plans(rows), view, terms)  # as it makes them
    if ct is None:  # no chain
        return screen, []
    free, room, _ = terms.memory([0.0] * view.n, forecast.hot(), view.block_bytes,
                                 cfg.costs.safety_margin_gib * GIB)  # fmt: skip
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # as the decider
        return screen, cannot_pay(ct, queues, view, cfg, terms, free, room)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), data=st.data())
def test_a_chain_the_screen_rules_out_cannot_pay(case: Case, data: st.DataObject) -> None:
    n = case.cands.total_blocks
    probs = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    rate = data.draw(st.sampled_from(RATES))
    evict = None if rate is None else np.full(case.view.n, rate)
    if evict is not None and data.draw(st.booleans()):  # some nodes evict, others not
        evict[::2] = 0.0
    case = dataclasses.replace(case, view=dataclasses.replace(
        case.view, evict_blocks_per_ms=evict, would_route=None))  # fmt: skip
    factor = data.draw(st.sampled_from((1.0, 0.3, 1.8)))
    screen, weighed = both_verdicts(case, probs, factor)
    assert all(w for s, w in zip(screen, weighed, strict=True) if s)


class Counting(Decider):
    """The decider, counting the chains it makes copy terms for."""

    made = 0

    def _copy_terms(self, plans: Any, rows: Any, *args: Any) -> Any:
        self.made += len(rows)
        return super()._copy_terms(plans, rows, *args)


def test_nodes_that_evict_before_any_use_get_no_copy_terms_and_the_same_commands() -> None:
    """Node 0 holds the chain and is queued; node 1 is idle. Evicting 50 blocks a ms, the
    idle node would take the copy long before its use: no copy terms, the same (no)
    commands as weighing the chain; evicting nothing, the copy is made."""
    cands, probs = one_chain()
    cfg = decider_cfg()
    calm = Counting(cfg)
    assert calm.decide(cands, probs, view(queue=(3000.0, 0.0))) and calm.made == 1
    hot = view(queue=(3000.0, 0.0), evict_per_ms=(50.0, 50.0))
    screened, every = Counting(cfg), EveryChain(cfg)
    assert screened.decide(cands, probs, hot) == every.decide(cands, probs, hot) == []
    assert screened.made == 0


@settings(max_examples=150, deadline=None)
@given(
    queued=st.floats(16.0, 60.0),
    bandwidth=st.floats(0.3, 3.0),
    excess=st.one_of(st.none(), st.floats(-2.0, 6.0)),
    factor=st.sampled_from((1.0, 0.6, 1.5)),
    reclaim=st.sampled_from((0.0, 2.0)),
)
def test_the_screen_keeps_a_one_block_copy_just_worth_making(
    queued: float, bandwidth: float, excess: float | None, factor: float, reclaim: float
) -> None:
    """At the edge: node 0 holds a 4-block chain and is queued a little, node 1 holds its
    first 3 blocks and is idle, so the only copy is of one block. With P just high enough
    for ``cannot_pay`` to let the chain through (found by bisection), the screen keeps it:
    its bounds are tight where the copy is smallest (no eviction, or ``excess`` more blocks
    evicted before the use than node 1 has free, less the copy; with or without the
    reclaim term, which the screen leaves out)."""
    chain = (1, 2, 3, 4)
    base = view(queue=(queued, 0.0), holders={1: 0b11, 2: 0b11, 3: 0b11, 4: 0b01},
                bytes_per_ms=GBPS_100 * bandwidth)  # fmt: skip
    if excess is not None:
        free = base.free_bytes[1] / base.block_bytes
        rate = (free + excess) / (decider_cfg().window_ms + 0.0)
        base = dataclasses.replace(base, evict_blocks_per_ms=np.array([rate, rate]))
    cands, _ = one_chain(chain=chain)
    case = Case(cands, base, decider_cfg(costs={"reclaim_ms_per_block": reclaim}))

    def verdicts(p: float) -> tuple[bool, bool]:
        screen, weighed = both_verdicts(case, np.full(len(chain), p), factor)
        return screen[0], weighed[0]

    if verdicts(1.0)[1]:
        return  # no P pays for the copy: no edge to test
    lo, hi = 0.0, 1.0  # cannot_pay rules out at lo (or lo is 0), lets through at hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if verdicts(mid)[1] else (lo, mid)
    assert not verdicts(hi)[0]


def two_nodes(
    block_bytes: int, prefill: PrefillCost, hbm: dict[int, int], **kw: Any
) -> ClusterView:
    """``decider_views.view`` on two nodes, node 0 queued 2 s and evicting a block a ms, node
    1 idle; ``kw`` its other arguments; blocks of ``block_bytes`` and 16 tokens."""
    base = view(queue=(2000.0, 0.0), holders=hbm, evict_per_ms=(1.0, 0.0), **kw)
    return dataclasses.replace(base, block_bytes=block_bytes, block_tokens=16, prefill=prefill)


def test_an_infinite_block_prefill_screens_nothing() -> None:
    """With a block prefill of +inf the memory term is 0 x inf: nothing is screened. And the
    commands are those of weighing every chain: a review found a 10-block chain left in the
    batch barring a 2-block one's copy, through a ``most`` taken over the batch's padding
    (now over each chain's own cuts, ``test_copy_terms_exact``)."""
    a, b = tuple(range(100, 110)), (200, 201)
    block = 32 << 20
    cluster = two_nodes(block, PrefillCost(20.0, 0.07, 1e306), {x: 0b01 for x in a + b},
                        free_gib=[5.0 * block / GIB] * 2, bytes_per_ms=block / 1000.0)  # fmt: skip
    assert not screens(cluster)
    cfg = decider_cfg(costs={"safety_margin_gib": 0.0, "reclaim_ms_per_block": 0.0})
    cands = ChainCandidates.build([a, b])
    probs = np.concatenate([np.full(len(a), 0.06), np.full(len(b), 1.0)])
    with np.errstate(all="ignore"):
        made = Decider(cfg).decide(cands, probs, cluster)
        assert made == EveryChain(cfg).decide(cands, probs, cluster)


def test_a_block_size_that_is_not_positive_screens_nothing() -> None:
    """A copy's time grows with its blocks only for a positive block size (a review found a
    negative one making the one-block cost no lower bound)."""
    prefill = PrefillCost(20.0, 0.07, 7e-7)
    for block in (-(32 << 20), 0, MAX_BLOCK_BYTES):
        assert not screens(two_nodes(block, prefill, {1: 0b01}))
    assert screens(two_nodes(32 << 20, prefill, {1: 0b01}))

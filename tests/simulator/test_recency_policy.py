"""``predictive_recency``: P(used within the window | age) learnt online from the past alone;
where prediction does not pay (low load) it costs nearly nothing."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from simtraces import tiny_trace

from kvcast.features.traces import Trace
from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.simulator.config import SimConfig
from kvcast.simulator.engine import simulate
from kvcast.simulator.recency_scorer import AGES_MS, RecencyScorer
from kvcast.simulator.replication_policies import make_policy


def periodic_trace(gap_ms: float, n: int = 120, late: list[int] | None = None) -> Trace:
    """Block 7 is used every ``gap_ms``; every other block once (or ``late`` after half)."""
    rows = []
    for i in range(n):
        blocks = [7, 1000 + i] if late is None or i < n // 2 else late
        rows.append((i * gap_ms, 1024, 1, blocks))
    return tiny_trace(rows)


def test_the_learnt_table_is_the_reuse_hazard_of_the_stream() -> None:
    tr = periodic_trace(10_000.0)
    sim = SimpleNamespace(trace=tr)
    scorer = RecencyScorer(window_ms=30_000.0, refresh_ms=10_000.0, pseudo_count=0.0)
    cands = ChainCandidates.build([(7,), (1000,)])
    p = scorer.score(1_190_001.0, cands, sim)  # just after the last use of block 7 arrived  # type: ignore[arg-type]
    table = dict(zip(AGES_MS, scorer.table, strict=True))
    # half the uses are of block 7, which always comes back 10 s later; the others never do
    assert table[0.0] == pytest.approx(0.5, abs=0.02)
    assert table[20_000.0] == 0.0 and table[60_000.0] == 0.0
    assert p[0] > 0.0 and p[1] == 0.0  # block 1000 was used ~1190 s ago


def test_with_no_evidence_yet_it_predicts_nothing() -> None:
    sim = SimpleNamespace(trace=periodic_trace(10_000.0))
    scorer = RecencyScorer(window_ms=30_000.0, refresh_ms=10_000.0, pseudo_count=50.0)
    p = scorer.score(5_000.0, ChainCandidates.build([(7,)]), sim)  # type: ignore[arg-type]
    assert p.tolist() == [0.0]


def test_scores_use_only_arrivals_up_to_now() -> None:
    cands = ChainCandidates.build([(7,), (8,)])

    def score(trace: Trace) -> np.ndarray:
        scorer = RecencyScorer(30_000.0, 10_000.0, 0.0)
        return scorer.score(590_000.0, cands, SimpleNamespace(trace=trace))  # type: ignore[arg-type]

    # the second half (from 600 s) differs; scores at 590 s must not
    np.testing.assert_array_equal(
        score(periodic_trace(10_000.0)), score(periodic_trace(10_000.0, late=[8, 9]))
    )


def test_recency_costs_at_most_two_percent_at_low_load(bundled: Trace) -> None:
    head = bundled.window(0, 240_000)
    cfg = SimConfig()
    alone = simulate(head, cfg, "dynamo_kv", time_scale=0.5).summary
    s = simulate(head, cfg, make_policy("predictive_recency", cfg), time_scale=0.5).summary
    assert s["policy"] == "predictive_recency"
    for q in ("p50", "p99"):
        assert s["ttft_ms"][q] <= 1.02 * alone["ttft_ms"][q]
    assert s["active_evictions_by_speculative"] == 0
    assert s["peak_speculative_bytes_over_quota"] == 0


def _watched_candidates(policy: object, log: list) -> None:
    """Record the candidates each tick offers (and which requests had arrived by then)."""
    inner = policy.inner  # type: ignore[attr-defined]
    offer = inner.candidates

    def watch(now_ms: float, sim: object) -> ChainCandidates:
        c = offer(now_ms, sim)
        arrived = {int(b) for r in range(sim._next)  # type: ignore[attr-defined]
                   for b in sim.trace.requests["block_hashes"].iloc[r]}  # type: ignore[attr-defined]  # fmt: skip
        log.append((now_ms, c.chains, arrived))
        return c

    inner.candidates = watch


def test_a_tick_offers_only_requests_that_have_arrived_and_no_earlier_runs_chains() -> None:
    from simtraces import config

    from kvcast.simulator.engine import Simulator
    from kvcast.simulator.replication_policies import make_policy

    cfg = config(nodes=2, arrival_spread="off")
    policy = make_policy("predictive_recency", cfg)
    first = tiny_trace(
        [
            (0.0, 2048, 1, [1, 2, 3, 4]),
            (500.0, 2048, 1, [5, 6, 7, 8]),
            (1_000.0, 2048, 1, [9, 10, 11, 12]),
        ]
    )  # on ticks: 0, 500, 1000 ms
    log: list = []
    _watched_candidates(policy, log)
    Simulator(first, cfg, policy).run()
    assert log and all(set(ch) <= arrived for _, chains, arrived in log for ch in chains)
    log.clear()  # the same policy object, another run
    second = [(0.0, 2048, 1, [100, 101, 102, 103]), (1_000.0, 2048, 1, [100, 101, 102, 103])]
    Simulator(tiny_trace(second), cfg, policy).run()
    assert not [ch for _, chains, _ in log for ch in chains if set(ch) & set(range(1, 13))]

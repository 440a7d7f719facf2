"""Every budget is hard: per-node speculative quota, per-link and global bandwidth, transfers
in flight; replicas past their TTL are ordered evicted."""

from __future__ import annotations

import random

import pytest
from decider_views import BLOCK, CHAIN, GIB, decider_cfg, one_chain, view

from kvcast.predictor.budgets import BudgetLedger, Transfer
from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.commands import EvictCommand, ReplicateCommand
from kvcast.predictor.decider import Decider
from kvcast.predictor.decider_config import BudgetConfig

OTHER = tuple(range(101, 111))


def two_chains(p: float = 0.9) -> tuple[ChainCandidates, list[float]]:
    return ChainCandidates.build([CHAIN, OTHER]), [p] * 20


def both_on_node0() -> dict[int, int]:
    return {b: 0b001 for b in CHAIN + OTHER}


def reps(cmds: list) -> list[ReplicateCommand]:
    return [c for c in cmds if isinstance(c, ReplicateCommand)]


def test_quota_refuses_a_copy_that_would_overrun_the_target() -> None:
    # 48 GiB quota: nodes 1 and 2 already hold 47 GiB of replicas, the chain is 1.6 GiB
    d = Decider()
    cmds = reps(d.decide(*one_chain(0.9), view(spec_gib=[0.0, 47.0, 47.0])))
    assert cmds == [] and d.refused["quota"] == 1


def test_quota_counts_replicas_still_in_flight() -> None:
    cfg = decider_cfg(budgets={"speculative_quota_gib": 2.0})  # room for one 10-block chain
    d = Decider(cfg)
    v = view(queue=(2000.0, 0.0, 5000.0), holders=both_on_node0())
    cmds = reps(d.decide(*two_chains(), v))
    assert len(cmds) == 1 and d.refused["quota"] == 1


def test_link_budget_refuses_a_second_copy_out_of_the_same_nic() -> None:
    cfg = decider_cfg(budgets={"link_budget_gbps": 1.0})  # 125 MB per window < one chain
    d = Decider(cfg)
    cmds = reps(d.decide(*two_chains(), view(holders=both_on_node0())))
    assert len(cmds) == 1 and d.refused["link_bandwidth"] == 1


def test_global_budget_refuses_beyond_the_cluster_rate() -> None:
    cfg = decider_cfg(budgets={"global_budget_gbps": 1.0})
    d = Decider(cfg)
    cmds = reps(d.decide(*two_chains(), view(holders=both_on_node0())))
    assert len(cmds) == 1 and d.refused["global_bandwidth"] == 1


def test_max_in_flight_caps_concurrent_transfers() -> None:
    d = Decider(decider_cfg(budgets={"max_in_flight": 1}))
    cmds = reps(d.decide(*two_chains(), view(holders=both_on_node0())))
    assert len(cmds) == 1 and d.refused["in_flight"] == 1


def test_replicas_past_their_ttl_are_ordered_evicted() -> None:
    d = Decider(decider_cfg(budgets={"ttl_ms": 10_000.0}))
    cmd = reps(d.decide(*one_chain(0.9), view()))[0]
    assert cmd.ttl_ms == 10_000.0
    empty = ChainCandidates.build([])
    assert d.decide(empty, [], view(now_ms=9_000.0)) == []
    out = d.decide(empty, [], view(now_ms=10_000.0))
    assert out == [EvictCommand(cmd.target, CHAIN, "ttl expired")]
    assert d.decide(empty, [], view(now_ms=20_000.0)) == []  # ordered once


def test_a_chain_with_a_live_replica_is_not_copied_again() -> None:
    d = Decider()
    assert len(reps(d.decide(*one_chain(0.9), view()))) == 1
    # later: node 1 now holds it too (landed), and is busy; one copy is enough
    landed = {b: 0b011 for b in CHAIN}
    v = view(queue=(2000.0, 2000.0, 0.0), holders=landed, now_ms=1_000.0)
    assert reps(d.decide(*one_chain(0.9), v)) == []


def test_a_copy_reported_gone_before_its_ttl_frees_the_chain_to_be_copied_again() -> None:
    d = Decider()
    first = reps(d.decide(*one_chain(0.9), view()))
    assert len(first) == 1
    later = view(queue=(2000.0, 0.0, 0.0), holders={b: 0b001 for b in CHAIN}, now_ms=1_000.0)
    assert reps(d.decide(*one_chain(0.9), later)) == []  # the ledger still counts the copy
    d.forget(first[0].target, CHAIN)  # the copy failed, or its node evicted it
    assert len(d.feedback) == 0 and d.feedback.settled == 0  # not learnt from
    again = view(queue=(2000.0, 0.0, 0.0), holders={b: 0b001 for b in CHAIN}, now_ms=2_000.0)
    assert len(reps(d.decide(*one_chain(0.9), again))) == 1


def test_forgetting_a_copy_the_ledger_never_placed_changes_nothing() -> None:
    ledger = BudgetLedger(BudgetConfig())
    ledger.record(Transfer(0.0, 10.0, 0, 1, BLOCK, (7,)), expiry_ms=1e9)
    assert ledger.forget(2, [7]) == 0 and ledger.has_replica(7)
    assert ledger.forget(1, [7, 8]) == 1 and not ledger.has_replica(7)
    assert ledger.expired(2e9) == {}  # nothing left to order evicted


def test_bandwidth_bucket_refills_at_the_budgeted_rate() -> None:
    cfg = BudgetConfig(link_budget_gbps=8.0, global_budget_gbps=800.0)  # 1 GB per 1 s window
    ledger = BudgetLedger(cfg)
    ledger.settle(0.0)
    assert ledger.refusal(0, 1, 2 * BLOCK, quota_room=1e12) is None
    ledger.record(Transfer(0.0, 10.0, 0, 1, 10 * BLOCK, ()), expiry_ms=1e9)  # 1.7 GB: in debt
    assert ledger.refusal(0, 2, BLOCK, quota_room=1e12) == "link_bandwidth"
    ledger.settle(500.0)
    assert ledger.refusal(0, 2, BLOCK, quota_room=1e12) == "link_bandwidth"
    ledger.settle(1_000.0)  # 1 GB refilled: back above zero
    assert ledger.refusal(0, 2, BLOCK, quota_room=1e12) is None


def test_quota_is_the_smaller_of_bytes_and_share_of_capacity() -> None:
    cfg = BudgetConfig(speculative_quota_gib=48.0, speculative_quota_fraction=0.1)
    assert cfg.quota_bytes(100.0 * GIB) == pytest.approx(10.0 * GIB)
    assert cfg.quota_bytes(1000.0 * GIB) == pytest.approx(48.0 * GIB)


@pytest.mark.parametrize("seed", range(20))
def test_expired_returns_exactly_the_replicas_past_their_ttl_at_every_instant(seed: int) -> None:
    """Whatever the order of copies, renewed copies and copies reported gone, each call
    returns every live replica whose TTL has passed, and no other (a pass over every
    replica is the reference: the ledger skips that pass while nothing is due)."""
    rng = random.Random(seed)
    ledger = BudgetLedger(BudgetConfig())
    live: dict[tuple[int, int], float] = {}  # (node, block) -> expiry: the reference
    now = 0.0
    for _ in range(300):
        now += rng.choice([0.0, rng.uniform(0.0, 40.0)])
        op = rng.random()
        if op < 0.5:  # a copy (a block already copied there renews its expiry)
            node, blocks = rng.randrange(3), tuple(rng.sample(range(12), rng.randint(1, 3)))
            expiry = now + rng.uniform(0.0, 200.0)
            ledger.record(Transfer(now, now + 1.0, 9, node, 1, blocks), expiry)
            live |= {(node, b): expiry for b in blocks}
        elif op < 0.6:  # copies reported gone before their TTL
            node, blocks = rng.randrange(3), rng.sample(range(12), 2)
            ledger.forget(node, blocks)
            for b in blocks:
                live.pop((node, b), None)
        else:
            due = sorted(key for key, exp in live.items() if exp <= now)
            got = sorted((n, b) for n, bs in ledger.expired(now).items() for b in bs)
            assert got == due, f"at {now}"
            for key in due:
                del live[key]

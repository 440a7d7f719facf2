"""The decider replicates exactly when P(hit) x saved > transfer + congestion + memory +
reclaim and every gate holds (hand-made cluster: node 0 holds a 10-block chain and is busy)."""

from __future__ import annotations

import numpy as np
import pytest
from decider_views import CHAIN, GBPS_100, decider_cfg, one_chain, view

from kvcast.predictor.commands import DecisionReason, ReplicateCommand
from kvcast.predictor.decider import Decider


def replications(cmds: list) -> list[ReplicateCommand]:
    return [c for c in cmds if isinstance(c, ReplicateCommand)]


def test_replicates_a_likely_chain_from_a_busy_holder_to_the_idle_node() -> None:
    cmds = replications(Decider().decide(*one_chain(0.9), view()))
    assert len(cmds) == 1
    cmd = cmds[0]
    assert (cmd.source, cmd.target) == (0, 1)
    assert cmd.block_hashes == CHAIN and cmd.priority == 0
    assert cmd.deadline_ms == pytest.approx(30_000.0) and cmd.ttl_ms == pytest.approx(30_000.0)


def test_reason_carries_the_numbers_of_the_inequality() -> None:
    cmd = replications(Decider().decide(*one_chain(0.9), view()))[0]
    r = cmd.reason
    assert isinstance(r, DecisionReason)
    # without the copy the best option is recomputing 10 blocks on idle node 1
    recompute = 0.07 * 5120 + 7e-7 * 5120**2
    assert r.saved_ms == pytest.approx(recompute)
    transfer = 0.05 + 10 * 160 * 2**20 / GBPS_100
    assert r.transfer_ms == pytest.approx(0.25 * transfer)
    assert r.reclaim_ms == pytest.approx(0.1 * 10 * 2.0)
    assert r.benefit_ms > r.cost_ms and r.net_ms == pytest.approx(r.benefit_ms - r.cost_ms)
    assert r.blocks_moved == 10 and "p=0.900" in str(r)


def test_does_not_replicate_when_the_probability_is_low() -> None:
    assert replications(Decider().decide(*one_chain(0.1), view())) == []


def test_does_not_replicate_over_a_slow_link() -> None:
    slow = GBPS_100 / 100  # 1 Gb/s: the copy takes longer than recomputing
    assert replications(Decider().decide(*one_chain(0.9), view(bytes_per_ms=slow))) == []


def test_does_not_replicate_to_a_full_target() -> None:
    full = view(free_gib=[50.0, 0.0, 0.0])
    cfg = decider_cfg(costs={"safety_margin_gib": 1.0})
    # nodes 1 and 2 are all pinned + cached; a replica may take cached space but the margin
    # and the replica must fit in what is not pinned: make everything pinned
    full.pinned_bytes[1:] = full.capacity_bytes[1:]
    full.cached_bytes[1:] = 0.0
    assert replications(Decider(cfg).decide(*one_chain(0.9), full)) == []


def test_gate_holder_queue_shorter_than_the_transfer_means_no_copy() -> None:
    # the holder frees up in 10 ms, copying even one block takes ~15 ms: waiting wins
    assert replications(Decider().decide(*one_chain(0.9), view(queue=(10.0, 0.0, 0.0)))) == []
    # at 100 ms a 3-block cut would land in ~46 ms, but the request would still compute the
    # other 7 blocks there (~270 ms): waiting for the holder wins, and the whole chain
    # (~154 ms) too is slower than the wait
    assert replications(Decider().decide(*one_chain(0.9), view(queue=(100.0, 0.0, 0.0)))) == []


def test_a_cut_is_priced_with_the_blocks_it_leaves_to_compute() -> None:
    busy = view(queue=(3000.0, 0.0, 0.0))  # the least TTFT without a copy: recompute (~377 ms)
    whole = replications(Decider().decide(*one_chain(1.0), busy))[0]
    assert whole.block_hashes == CHAIN and whole.reason.saved_ms == pytest.approx(376.75, abs=0.1)
    # the request comes in 100 ms: only 6 blocks land in time; the 4 others (~155 ms) are
    # still computed on the target, and come off the saving
    soon = replications(Decider().decide(*one_chain(1.0, first_use_ms=100.0), busy))[0]
    assert soon.block_hashes == CHAIN[:6]
    assert soon.reason.saved_ms == pytest.approx(376.75 - 155.2, abs=0.1)


def test_gate_first_use_sooner_than_the_transfer_means_no_copy() -> None:
    soon = one_chain(1.0, first_use_ms=10.0)  # even one block takes ~15 ms
    assert replications(Decider().decide(*soon, view())) == []
    in_time = one_chain(1.0, first_use_ms=800.0)
    assert len(replications(Decider().decide(*in_time, view()))) == 1


def test_a_known_first_use_is_not_acted_on_earlier_than_the_lead() -> None:
    early = one_chain(1.0, first_use_ms=20_000.0)
    assert replications(Decider().decide(*early, view())) == []


def test_the_target_with_the_most_net_benefit_wins() -> None:
    # node 2 is idle too but its link is congested: node 1 is chosen
    v = view(queue=(2000.0, 0.0, 0.0))
    v.links.backlog_ms[0, 2] = 500.0
    cmd = replications(Decider().decide(*one_chain(0.9), v))[0]
    assert cmd.target == 1


def test_probabilities_are_clipped_non_increasing_along_the_chain() -> None:
    cands, p = one_chain(0.9)
    p[3] = 0.01  # a child cannot be likelier than its parent: the cut stops before block 4
    cmds = replications(Decider().decide(cands, p, view()))
    assert len(cmds) == 1 and cmds[0].block_hashes == CHAIN[:3]


def test_a_wrong_number_of_probabilities_is_refused() -> None:
    cands, _ = one_chain()
    with pytest.raises(ValueError, match="probabilities"):
        Decider().decide(cands, np.ones(3), view())

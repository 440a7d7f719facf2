"""Object and target choice: whole chains root-first, never a hot node, never across tenants
(unless public), only where the router would send the request; promotion from lower tiers."""

from __future__ import annotations

from collections.abc import Sequence

from decider_views import BLOCK, CHAIN, decider_cfg, one_chain, view

from kvcast.predictor.chains import prefix_lengths
from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.commands import PromoteCommand, ReplicateCommand
from kvcast.predictor.decider import Decider


def reps(cmds: list) -> list[ReplicateCommand]:
    return [c for c in cmds if isinstance(c, ReplicateCommand)]


def test_prefix_lengths_stop_at_the_first_missing_block() -> None:
    hbm = {1: 0b111, 2: 0b011, 3: 0b001, 5: 0b111}
    assert prefix_lengths((1, 2, 3, 4, 5), 3, hbm, None) == [3, 2, 1]
    assert prefix_lengths((1, 2, 3, 4, 5), 3, hbm, {4: 0b001}) == [5, 2, 1]


def test_copies_go_root_first_from_the_first_block_the_target_lacks() -> None:
    holders = {b: 0b001 for b in CHAIN} | {b: 0b011 for b in CHAIN[:3]}
    d = Decider()
    cmd = reps(d.decide(*one_chain(0.9), view(holders=holders)))[0]
    assert cmd.target == 1 and cmd.block_hashes == CHAIN  # the chain from its root
    assert cmd.reason.blocks_moved == 7  # only what node 1 lacks
    assert all(d.ledger.pending[b] == 0b010 for b in CHAIN[3:])
    assert not any(b in d.ledger.pending for b in CHAIN[:3])


def test_a_chain_is_cut_where_the_source_prefix_ends() -> None:
    holders = {b: 0b001 for b in CHAIN[:6]}  # node 0 holds only 6 of the 10 blocks
    cmd = reps(Decider().decide(*one_chain(0.9), view(holders=holders)))[0]
    assert cmd.block_hashes == CHAIN[:6]


def test_never_a_node_predicted_hot() -> None:
    # node 1 is idle now, but a request due in 1.5 s, whose prefix only node 1 holds, will
    # bring it ~2.5 s of prefill (20k new tokens after a 60-block prefix)
    hot_chain = tuple(range(200, 260))
    holders = {b: 0b001 for b in CHAIN} | {b: 0b010 for b in hot_chain}
    cands = ChainCandidates.build(
        [CHAIN, hot_chain], first_use_ms=[float("nan"), 1_500.0], tail_tokens=[512, 20_000]
    )
    probs = [0.9] * len(CHAIN) + [1.0] * len(hot_chain)
    cfg = decider_cfg(targets={"hot_queue_ms": 1_000.0})
    v = view(queue=(2000.0, 0.0, 300.0), holders=holders)
    cmds = reps(Decider(cfg).decide(cands, probs, v))
    assert cmds and all(c.target != 1 for c in cmds)
    assert [c.target for c in cmds if c.block_hashes[0] == CHAIN[0]] == [2]


def test_a_private_prefix_never_crosses_tenants() -> None:
    others = (None, frozenset({"b"}), frozenset({"b"}))
    cmds = reps(Decider().decide(*one_chain(0.9, tenant="a"), view(node_tenants=others)))
    assert cmds == []


def test_a_public_prefix_may_cross_tenants_but_only_its_public_blocks() -> None:
    others = (None, frozenset({"b"}), frozenset({"b"}))
    cmds = reps(
        Decider().decide(*one_chain(0.9, tenant="a", public_blocks=4), view(node_tenants=others))
    )
    assert len(cmds) == 1 and cmds[0].block_hashes == CHAIN[:4]


def test_a_node_of_the_same_tenant_gets_the_whole_chain() -> None:
    mine = (None, frozenset({"a"}), frozenset({"b"}))
    cmd = reps(Decider().decide(*one_chain(0.9, tenant="a"), view(node_tenants=mine)))[0]
    assert cmd.target == 1 and cmd.block_hashes == CHAIN


def test_no_copy_where_the_router_would_not_send_the_request() -> None:
    def sticky(chain: tuple[int, ...], tokens: int, match: Sequence[int]) -> int:
        return 0  # a router that always picks node 0, replicas or not

    assert reps(Decider().decide(*one_chain(0.9), view(would_route=sticky))) == []


def test_a_copy_to_the_node_the_router_picks_anyway_saves_its_recompute() -> None:
    def to_two(chain: tuple[int, ...], tokens: int, match: Sequence[int]) -> int:
        return 2  # the router sends it to node 2 whatever the replicas

    cmd = reps(Decider().decide(*one_chain(0.9), view(would_route=to_two)))[0]
    assert cmd.target == 2


def test_a_replica_that_would_be_evicted_before_use_is_not_made() -> None:
    # every node evicts a block every ~10 ms and none has free HBM: a replica (evicted before
    # any cached block) would not live until its use
    v = view(free_gib=[0.0, 0.0, 0.0], evict_per_ms=[0.1, 0.1, 0.1])
    assert reps(Decider().decide(*one_chain(0.9), v)) == []


def test_a_chain_in_a_nodes_dram_is_promoted_ahead_of_use() -> None:
    dram_bw = 25e9 / 1e3  # bytes per ms
    lower = [[], [(set(CHAIN), dram_bw)], []]
    cmds = Decider().decide(*one_chain(0.9), view(holders={}, lower=lower))
    promos = [c for c in cmds if isinstance(c, PromoteCommand)]
    assert len(promos) == 1 and promos[0].node == 1 and promos[0].block_hashes == CHAIN
    assert promos[0].reason.saved_ms == len(CHAIN) * BLOCK / dram_bw


def test_object_choice_takes_the_most_valuable_chain_first() -> None:
    small, big = tuple(range(300, 303)), tuple(range(400, 440))
    holders = {b: 0b001 for b in small + big}
    cands = ChainCandidates.build([small, big])
    cmds = reps(Decider().decide(cands, [0.9] * 43, view(holders=holders)))
    assert cmds[0].block_hashes[0] == big[0] and cmds[0].priority == 0


def test_equal_targets_go_to_the_lowest_node_on_every_machine() -> None:
    # nodes 1..7 are identical and idle: every one of them nets the same; the choice must not
    # depend on how the CPU's sort orders ties (numpy's default sort differs with AVX-512)
    queue = (2000.0,) + (0.0,) * 7
    cmd = reps(Decider().decide(*one_chain(0.9), view(queue=queue)))[0]
    assert cmd.target == 1

    # the same through the router probe, which accepts whichever idle node gets the copy
    def route(blocks: object, tokens: int, match: Sequence[int]) -> int:
        return next((t for t in range(1, len(match)) if match[t] == max(match)), 0)

    probe = view(queue=queue, would_route=route)
    cmd = reps(Decider().decide(*one_chain(0.9), probe))[0]
    assert cmd.target == 1

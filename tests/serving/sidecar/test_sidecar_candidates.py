"""Candidates as the simulator's predictive policies take them: each request's full blocks
(a partial last block is left out), newest first, one per (tenant, chain), within the
lookback; the tick scores each distinct block once and maps it back to every chain."""

from __future__ import annotations

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.events import RequestArrived
from kvcast.features.online.state import FeatureState
from kvcast.prefill import PrefillModel
from kvcast.serving.sidecar.consumer import StateKeeper
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.recent_chains import RecentChains, full_blocks
from kvcast.serving.sidecar.replicas import ReplicaTracker
from kvcast.serving.sidecar.tick_input import Holders, gpu_holders, snapshot


def _arrival(ts: float, hashes: tuple[int, ...], tokens: int, tenant: str = "t") -> RequestArrived:
    return RequestArrived(ts, f"r{ts}", 0, tenant, None, tokens, 10, hashes)


def test_a_partial_last_block_is_not_part_of_the_chain() -> None:
    assert full_blocks((1, 2, 3), input_tokens=3 * 16, block_tokens=16) == (1, 2, 3)
    assert full_blocks((1, 2, 3), input_tokens=3 * 16 - 1, block_tokens=16) == (1, 2)
    assert full_blocks((1, 2, 3), input_tokens=0, block_tokens=16) == (1, 2)


def test_recent_chains_are_newest_first_deduplicated_and_within_the_lookback() -> None:
    chains = RecentChains(lookback_ms=1_000.0, limit=2, block_tokens=16)
    chains.add(_arrival(0.0, (9, 8), 32))
    chains.add(_arrival(100.0, (1, 2), 32))
    chains.add(_arrival(200.0, (1, 3), 32))
    chains.add(_arrival(300.0, (1, 2), 32))  # seen again: now the newest
    chains.add(_arrival(400.0, (1, 2), 32, tenant="u"))  # another tenant's chain is its own
    c = chains.candidates(now_ms=1_050.0, default_tail_tokens=5)
    assert c.chains == ((1, 2), (1, 2)) and c.tenants == ("u", "t")
    assert list(c.tail_tokens) == [5, 5]
    c = chains.candidates(now_ms=1_250.0, default_tail_tokens=5)  # (1, 3) at 200 has expired
    assert c.chains == ((1, 2), (1, 2)) and len(chains) == 2


def test_the_tick_scores_each_distinct_block_once_and_maps_it_to_every_chain() -> None:
    cfg = FeatureConfig(nodes=2, block_tokens=16)
    state = FeatureState(cfg)
    chains = RecentChains(60_000.0, 10, 16)
    keeper = StateKeeper(state, EventQueue(100), chains, ReplicaTracker(),
                         NodeLoads(2, PrefillModel(), 5.0))  # fmt: skip
    keeper.apply([_arrival(1_000.0, (1, 2, 3), 48), _arrival(2_000.0, (1, 2, 4, 5), 64)])
    inp = snapshot(keeper, now_ms=3_000.0, default_tail_tokens=0)
    assert inp.cands.chains == ((1, 2, 4, 5), (1, 2, 3))
    assert inp.blocks == [1, 2, 4, 5, 3] and inp.rows.shape == (5, len(state.spec))
    assert list(inp.where) == [0, 1, 2, 3, 0, 1, 4]
    since = inp.rows[:, state.spec.index("since_last_ms")]
    assert np.allclose(since[inp.where], [1000, 1000, 1000, 1000, 1000, 1000, 2000])


def test_the_ticks_gpu_holders_are_those_of_the_residency_made_only_when_read() -> None:
    from kvcast.features.events import BlockStored

    cfg = FeatureConfig(nodes=3, block_tokens=16)
    state = FeatureState(cfg)
    keeper = StateKeeper(state, EventQueue(100), RecentChains(60_000.0, 10, 16),
                         ReplicaTracker(), NodeLoads(3, PrefillModel(), 5.0))  # fmt: skip
    keeper.apply([
        _arrival(1_000.0, (1, 2, 3), 48), _arrival(2_000.0, (1, 2, 4, 5), 64),
        BlockStored(2_100.0, 0, (1, 2, 4), None, 16), BlockStored(2_200.0, 2, (1, 9), None, 16),
    ])  # fmt: skip
    inp = snapshot(keeper, now_ms=3_000.0, default_tail_tokens=0)
    assert isinstance(inp.hbm, Holders) and inp.hbm._args is not None  # not made yet
    assert inp.hbm.get(1) == 0b101 and inp.hbm._args is None  # the first lookup makes it
    assert dict(inp.hbm) == {1: 0b101, 2: 0b001, 4: 0b001}  # held blocks only (5, 3: none)
    assert dict(inp.hbm) == gpu_holders(keeper, inp.blocks, inp.rows)
    assert inp.hbm.get(3, 0) == 0 and 3 not in inp.hbm and len(inp.hbm) == 3


def test_events_older_than_the_stream_are_restamped_not_dropped() -> None:
    state = FeatureState(FeatureConfig(nodes=2, block_tokens=16))
    keeper = StateKeeper(state, EventQueue(100), RecentChains(60_000.0, 10, 16),
                         ReplicaTracker(), NodeLoads(2, PrefillModel(), 5.0))  # fmt: skip
    keeper.apply([_arrival(5_000.0, (1, 2), 32), _arrival(4_000.0, (3, 4), 32)])
    keeper.commit(6_000.0)
    keeper.apply([_arrival(5_500.0, (5, 6), 32)])
    assert keeper.restamped == 2 and state.counters["out_of_order_dropped"] == 0
    assert keeper.applied == 3 and len(keeper.chains) == 3


def _keeper(tolerance_ms: float = 0.0) -> StateKeeper:
    cfg = FeatureConfig(nodes=2, block_tokens=16, reorder_tolerance_ms=tolerance_ms)
    return StateKeeper(FeatureState(cfg), EventQueue(100), RecentChains(60_000.0, 10, 16),
                       ReplicaTracker(), NodeLoads(2, PrefillModel(), 5.0))  # fmt: skip


def test_a_chain_keeps_the_cover_of_its_request_as_the_state_applied_it() -> None:
    keeper = _keeper()
    keeper.apply([_arrival(1_000.0, (1, 2, 3), 48), _arrival(2_000.0, (1, 2, 4, 5), 56)])
    cands, covers = keeper.chains.covered(3_000.0, 0)
    assert cands.chains == ((1, 2, 4), (1, 2, 3))  # the second's last block is partial
    k = keeper.state.blocks.k
    got = [[(run[k + 4], start, end) for run, start, end in c] for c in covers]  # HASHES
    # the runs as they are now: the first request's one run (1, 2, 3) was cut by the second
    # (its cover names the head, no longer as long: the tick looks that chain's blocks up)
    assert got == [[((1, 2), 0, 2), ((4, 5), 2, 4)], [((1, 2), 0, 3)]]
    inp = snapshot(keeper, now_ms=3_000.0, default_tail_tokens=0)
    plain = keeper.state.chain_rows(3_000.0, cands.chains)
    assert inp.blocks == plain[0] and inp.rows.tobytes() == plain[2].tobytes()


def test_a_request_held_for_reordering_leaves_its_chain_without_a_cover() -> None:
    keeper = _keeper(tolerance_ms=500.0)  # held until the stream is 500 ms past it
    keeper.apply([_arrival(1_000.0, (1, 2, 3), 48), _arrival(1_200.0, (7, 8), 32)])
    assert keeper.state.last_cover is None  # neither applied yet
    keeper.apply([_arrival(1_600.0, (9,), 16)])  # releases the first, not the third
    _, covers = keeper.chains.covered(2_000.0, 0)
    assert covers == (None, None, None)


def test_a_repeated_chain_without_a_cover_keeps_the_one_noted_before() -> None:
    chains = RecentChains(lookback_ms=1_000.0, limit=4, block_tokens=16)
    first: list = [([0.0], 0, 2)]  # (stands in for BlockTable.cover's runs)
    chains.add(_arrival(0.0, (1, 2), 32), first)
    chains.add(_arrival(100.0, (1, 2), 32))  # the same blocks, held for reordering
    assert chains.covered(200.0, 0)[1] == (first,)
    second: list = [([1.0], 0, 2)]
    chains.add(_arrival(300.0, (1, 2), 32), second)
    assert chains.covered(400.0, 0)[1] == (second,)


def test_a_chain_counts_a_repeated_block_once_as_the_feature_state_does() -> None:
    """(1, 2, 1, 3) with three blocks' worth of tokens and a few more: its blocks once each
    are (1, 2, 3), of which the first three are full by the token count, as the feature
    state (and the offline rows) read it; the candidates are the same blocks."""
    keeper = _keeper()
    keeper.apply([_arrival(1_000.0, (1, 2, 1, 3), 3 * 16 + 5)])
    cands, covers = keeper.chains.covered(2_000.0, 0)
    assert cands.chains == ((1, 2, 3),) and covers == (None,)  # a new tuple: no cover
    assert sorted(keeper.state.candidates(2_000.0)) == [1, 2, 3]

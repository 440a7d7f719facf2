"""The decider on inputs a live cluster produces now and then: a down link, unknown telemetry,
a target that holds part of a chain past a gap, a router that ignores where the cache is."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from decider_views import CHAIN, GBPS_100, one_chain, view

from kvcast.predictor.cluster_view import ClusterView, Links
from kvcast.predictor.commands import EvictCommand, PromoteCommand, ReplicateCommand
from kvcast.predictor.decider import Decider


def with_bandwidth(v: ClusterView, bw: np.ndarray) -> ClusterView:
    links = v.links
    return dataclasses.replace(v, links=Links(bw, links.latency_ms, links.backlog_ms, links.tier))


def copies(cmds: list) -> list[tuple[int, int]]:
    return [(c.source, c.target) for c in cmds if isinstance(c, ReplicateCommand)]


def test_a_down_link_or_a_zero_diagonal_does_not_stop_the_tick() -> None:
    down = np.full((3, 3), GBPS_100)
    down[1, 2] = 0.0  # a link between two other nodes is down
    zero_diagonal = np.full((3, 3), GBPS_100)
    np.fill_diagonal(zero_diagonal, 0.0)  # "no link to itself"
    for bw in (down, zero_diagonal):
        assert copies(Decider().decide(*one_chain(0.9), with_bandwidth(view(), bw))) == [(0, 1)]


def test_a_tier_of_unknown_speed_is_never_promoted_from() -> None:
    lower = ((), ((set(CHAIN), float("nan")),), ())
    d = Decider()
    cmds = d.decide(*one_chain(0.9), view(queue=(0.0, 0.0, 0.0), lower=lower, holders={}))
    assert not [c for c in cmds if isinstance(c, PromoteCommand)]
    d.ledger.settle(1e15)
    assert d.ledger.in_flight == []  # nothing that could never land holds a slot


def test_unknown_free_memory_never_yields_a_promotion_of_unknown_value() -> None:
    lower = ((), ((set(CHAIN), 25e6),), ())
    v = view(queue=(0.0, 0.0, 0.0), lower=lower, holders={})
    cached = v.cached_bytes.copy()
    cached[1] = np.nan  # node 1's telemetry lacks its cached bytes
    for c in Decider().decide(*one_chain(0.9), dataclasses.replace(v, cached_bytes=cached)):
        assert isinstance(c, PromoteCommand) and math.isfinite(c.reason.net_ms)


def test_blocks_the_target_holds_past_a_gap_are_neither_moved_nor_evicted_later() -> None:
    already = CHAIN[5:]  # node 1 holds blocks 6..10 (its root evicted first), not 1..5
    holders = {b: 0b001 for b in CHAIN} | {b: 0b011 for b in already}
    v = view(queue=(2000.0, 0.0, 5000.0), holders=holders)
    d = Decider()
    assert copies(d.decide(*one_chain(0.9), v)) == [(0, 1)]
    (placed,) = d.ledger.in_flight
    assert placed.blocks == CHAIN[:5] and placed.nbytes == 5 * v.block_bytes
    later = dataclasses.replace(v, now_ms=31_000.0)  # past the copy's TTL
    evicted = [c for c in d.decide(*one_chain(0.0), later) if isinstance(c, EvictCommand)]
    assert [(c.node, c.block_hashes) for c in evicted] == [(1, CHAIN[:5])]


def test_at_equal_queues_no_copy_is_made_even_where_a_route_probe_sends_the_request() -> None:
    # the inequality alone would copy to node 1 (its recompute saved); the pre-check keeps the
    # decider from it: the router picks again when the request comes (see _worth_a_look)
    def sticky(chain: object, tokens: object, match: object) -> int:
        return 1

    assert (
        copies(Decider().decide(*one_chain(0.9), view(queue=(0.0, 0.0, 0.0), would_route=sticky)))
        == []
    )
    busy_holder = view(queue=(1.0, 0.0, 0.0), would_route=sticky)
    assert copies(Decider().decide(*one_chain(0.9), busy_holder)) == [(0, 1)]

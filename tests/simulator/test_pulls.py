"""Reactive pulls: which blocks a pull moves and which it waits for, its booking on the link
and the source's pins, and its landing."""

from __future__ import annotations

import pytest

from kvcast.simulator.block_pool import BlockPool
from kvcast.simulator.config import NetworkConfig
from kvcast.simulator.network import Network
from kvcast.simulator.policies.base import RoutingDecision
from kvcast.simulator.pulls import InflightPulls, ReactivePulls

BLOCK = 1_000_000  # bytes


def cluster(nodes: int = 2, capacity: int = 8) -> tuple[list[BlockPool], Network, ReactivePulls]:
    holders: dict[int, int] = {}
    pools = [BlockPool(k, capacity, holders) for k in range(nodes)]
    net = Network(NetworkConfig(), nodes)
    return pools, net, ReactivePulls(pools, net, BLOCK)


def cache(p: BlockPool, blocks: list[int]) -> None:
    assert p.make_room(len(blocks), 0.0)
    p.add_active(blocks)
    p.release(blocks)


def test_split_waits_for_blocks_on_their_way_and_pulls_held_ones_up_to_a_gap() -> None:
    inflight = InflightPulls(2)
    inflight.note(0, [2], 50.0)
    inflight.note(0, [3], 80.0)
    held = {1, 3, 4, 6}.__contains__
    # 1 held, 2 and 3 on their way (3 held too: waited for, not pulled), 4 held, 5 neither
    assert inflight.split(0, [1, 2, 3, 4, 5, 6], held, 10.0) == ([1, 4], 2, 80.0)
    assert inflight.split(1, [1, 2], held, 10.0) == ([1], 0, 10.0)  # node 1: none on its way
    assert inflight.split(0, [5, 1], held, 10.0) == ([], 0, 10.0)


def test_a_landed_pull_is_forgotten_unless_a_later_one_brings_its_blocks_again() -> None:
    inflight = InflightPulls(1)
    inflight.note(0, [1, 2], 50.0)
    inflight.note(0, [2], 90.0)  # a later pull of 2 (the first landed, then it was evicted)
    inflight.landed(0, [1, 2], 50.0)
    assert len(inflight) == 1
    assert inflight.landing(0, 1, 50.0) is None and inflight.landing(0, 2, 50.0) == 90.0
    assert inflight.landing(0, 2, 90.0) is None and len(inflight) == 0  # landed: forgotten


def test_a_pull_moves_what_its_node_lacks_and_pins_it_on_the_source_until_it_lands() -> None:
    pools, net, pulls = cluster()
    cache(pools[1], [1, 2, 3, 4])
    d = RoutingDecision(node=0, pull_from=1, pull_blocks=4)
    pull = pulls.book(d, [1, 2, 3, 4, 5], 1, 10.0)  # node 0 holds block 1 already
    assert pull is not None
    assert (pull.source, pull.target, pull.moved, pull.waited) == (1, 0, (2, 3, 4), 0)
    assert pull.nbytes == 3 * BLOCK and pull.blocks == 3
    assert pull.ready_at == pytest.approx(10.0 + net.duration_ms(1, 0, 3 * BLOCK))
    assert net.transfers == 1 and net.bytes_moved == 3 * BLOCK
    assert pools[1].active == {2: 1, 3: 1, 4: 1} and len(pulls) == 3
    pulls.landed(pull, pull.ready_at)
    assert pools[1].active == {} and len(pulls) == 0
    assert pulls.place(pull, pull.ready_at) == [2, 3, 4]
    assert all(pools[0].in_hbm(b) for b in (2, 3, 4)) and pools[0].active == {}


def test_a_second_pull_of_a_prefix_on_its_way_waits_for_it_and_moves_only_the_rest() -> None:
    pools, net, pulls = cluster()
    cache(pools[1], [1, 2, 3])
    first = pulls.book(RoutingDecision(node=0, pull_from=1, pull_blocks=2), [1, 2], 0, 0.0)
    assert first is not None
    now = first.ready_at / 2  # the first still on its way
    second = pulls.book(RoutingDecision(node=0, pull_from=1, pull_blocks=3), [1, 2, 3], 0, now)
    assert second is not None
    assert (second.moved, second.waited, second.blocks) == ((3,), 2, 3)
    assert second.ready_at > first.ready_at and net.transfers == 2
    third = pulls.book(RoutingDecision(node=0, pull_from=1, pull_blocks=2), [1, 2], 0, now)
    assert third is not None and (third.moved, third.waited, third.nbytes) == ((), 2, 0)
    assert third.ready_at == first.ready_at and net.transfers == 2  # nothing more on the link
    assert pools[1].active == {1: 1, 2: 1, 3: 1}  # pinned once each, by the pull moving it


@pytest.mark.parametrize(
    "d",
    [
        RoutingDecision(node=0),  # no pull
        RoutingDecision(node=0, pull_from=0, pull_blocks=3),  # from its own node
        RoutingDecision(node=0, pull_from=1, pull_blocks=1),  # no more than it holds
        RoutingDecision(node=0, pull_from=2, pull_blocks=3),  # a source without the prefix
    ],
)
def test_no_pull_is_booked_when_the_decision_gives_it_nothing_to_move(
    d: RoutingDecision,
) -> None:
    pools, net, pulls = cluster(3)
    cache(pools[1], [1, 2, 3])
    assert pulls.book(d, [1, 2, 3], 1, 0.0) is None
    assert net.transfers == 0 and len(pulls) == 0 and pools[1].active == {}


def test_a_landed_pull_places_only_what_its_target_lacks_and_nothing_without_room() -> None:
    pools, _, pulls = cluster(2, capacity=3)
    cache(pools[1], [1, 2, 3])
    pull = pulls.book(RoutingDecision(node=0, pull_from=1, pull_blocks=3), [1, 2, 3], 0, 0.0)
    assert pull is not None
    pulls.landed(pull, pull.ready_at)
    cache(pools[0], [2])  # computed there meanwhile
    assert pulls.place(pull, pull.ready_at) == [1, 3]
    assert pools[0].active == {} and len(pools[0].cached) == 3

    pools, _, pulls = cluster(2, capacity=2)
    cache(pools[1], [1, 2])
    pull = pulls.book(RoutingDecision(node=0, pull_from=1, pull_blocks=2), [1, 2], 0, 0.0)
    assert pull is not None
    assert pools[0].make_room(1, 0.0)
    pools[0].add_active([9])  # in use: room for one block of the two
    assert pulls.place(pull, pull.ready_at) == []
    assert not pools[0].in_hbm(1) and not pools[0].in_hbm(2)

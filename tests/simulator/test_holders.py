"""The HBM residency index: per node, the longest prefix of a chain it holds, read in one pass."""

from __future__ import annotations

import random

from kvcast.simulator.block_pool import BlockPool
from kvcast.simulator.holders import hbm_prefixes


def test_each_nodes_prefix_ends_at_its_first_missing_block() -> None:
    holders = {1: 0b111, 2: 0b011, 3: 0b001, 5: 0b110}
    assert hbm_prefixes(holders, [1, 2, 3, 4], 3) == [3, 2, 1]
    assert hbm_prefixes(holders, [1, 2], 3) == [2, 2, 1]  # the whole chain on nodes 0 and 1
    assert hbm_prefixes(holders, [5, 1], 3) == [0, 2, 2]
    assert hbm_prefixes(holders, [9, 1], 3) == [0, 0, 0]
    assert hbm_prefixes(holders, [], 3) == [0, 0, 0]


def test_the_prefixes_are_those_of_the_pools_that_keep_the_index() -> None:
    rng = random.Random(0)
    holders: dict[int, int] = {}
    pools = [BlockPool(k, 64, holders) for k in range(5)]
    for p in pools:
        blocks = [b for b in range(40) if rng.random() < 0.8]
        assert p.make_room(len(blocks), 0.0)
        p.add_active(blocks)
    for _ in range(50):
        chain = rng.sample(range(40), rng.randint(0, 12))
        expected = []
        for p in pools:
            n = 0
            while n < len(chain) and p.in_hbm(chain[n]):
                n += 1
            expected.append(n)
        assert hbm_prefixes(holders, chain, len(pools)) == expected

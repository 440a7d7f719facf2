"""The decider's view of a running simulator: loads, memory, links, holders; probing the
router never touches the live router."""

from __future__ import annotations

import numpy as np
from simtraces import config, tiny_trace

from kvcast.simulator.cluster_adapter import SimulatorView
from kvcast.simulator.engine import Simulator


def finished_sim() -> Simulator:
    tr = tiny_trace([(0.0, 4000, 1, list(range(8))), (100.0, 4000, 1, list(range(100, 108)))])
    sim = Simulator(tr, config(nodes=3, arrival_spread="off"), "dynamo_kv")
    sim.run()
    return sim


def test_view_reports_each_nodes_memory_and_the_shared_holders_index() -> None:
    sim = finished_sim()
    v = SimulatorView(sim).view()
    bb = sim.block_bytes
    assert v.n == 3 and v.block_bytes == bb and v.block_tokens == 512
    for i, node in enumerate(sim.nodes):
        assert v.capacity_bytes[i] == node.pool.capacity * bb
        assert v.cached_bytes[i] == len(node.pool.cached) * bb
        assert v.pinned_bytes[i] == node.pool.in_use * bb
    assert v.hbm is sim.holders and v.free_bytes.min() >= 0
    assert v.links.tier[0, 1] == 2 and v.links.transfer_ms(0, 1, bb) > 0
    assert v.would_route is None and not v.reactive_pull


def test_probing_the_router_leaves_the_live_router_untouched() -> None:
    sim = finished_sim()
    live_state = sim.policy._rng.getstate()  # type: ignore[attr-defined]
    probe = Simulator(sim.trace, sim.cfg, "dynamo_kv").policy
    v = SimulatorView(sim, probe_router=probe).view()
    assert v.would_route is not None
    chain = tuple(range(8))
    holder = next(i for i in range(3) if sim.holders.get(0, 0) >> i & 1)
    assert v.would_route(chain, 4096, [8 if i == holder else 0 for i in range(3)]) == holder
    assert sim.policy._rng.getstate() == live_state  # type: ignore[attr-defined]


def test_eviction_rate_is_measured_between_views() -> None:
    sim = finished_sim()
    view = SimulatorView(sim)
    first = view.view().evict_blocks_per_ms
    assert first is not None and np.all(first == 0)

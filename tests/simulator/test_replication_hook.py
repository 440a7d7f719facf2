"""A replication policy acts through the hook on its own tick, under the cluster's physics."""

from __future__ import annotations

from collections.abc import Iterable

from simtraces import config, tiny_trace

from kvcast.predictor.commands import Command, EvictCommand, PromoteCommand, ReplicateCommand
from kvcast.simulator.engine import Simulator
from kvcast.simulator.policies.base import RoutingContext, RoutingDecision

BLOCK_GIB = 0.15625  # one 512-token Llama-3-70B fp16 block


class Pinned:
    """Routes request i to the node listed for it (a test router, not a mock)."""

    name = "pinned"

    def __init__(self, nodes: list[int]) -> None:
        self.nodes = nodes
        self.i = 0

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        self.i += 1
        return RoutingDecision(node=self.nodes[self.i - 1])


class Scripted:
    """Issues fixed commands at given simulated times."""

    def __init__(
        self, script: dict[float, list[Command]], quota_blocks: int = 16, tick_ms: float = 100.0
    ) -> None:
        self.script = script
        self.tick_ms = tick_ms
        self.speculative_quota_bytes = int(quota_blocks * BLOCK_GIB * 2**30)
        self.calls: list[float] = []

    def on_tick(self, now_ms: float, sim: Simulator) -> Iterable[Command]:
        self.calls.append(now_ms)
        return self.script.pop(now_ms, [])


CHAIN = list(range(10))


def run(script: dict[float, list[Command]], second_at: float = 5_000.0, **cfg: object):
    tr = tiny_trace([(0.0, 5000, 1, CHAIN), (second_at, 5000, 1, CHAIN)])
    rep = Scripted(script)
    sim = Simulator(
        tr, config(nodes=2, arrival_spread="off", **cfg), Pinned([0, 1]), replicator=rep
    )
    return sim, sim.run(), rep


def test_replicator_is_called_on_its_own_tick_not_only_at_arrivals() -> None:
    _, _, rep = run({})
    gaps = {round(b - a, 6) for a, b in zip(rep.calls, rep.calls[1:], strict=False)}
    assert gaps == {100.0} and len(rep.calls) > 40


def test_replicated_chain_is_hit_by_the_next_request_with_lead_time() -> None:
    cmd = ReplicateCommand(source=0, target=1, block_hashes=tuple(CHAIN), ttl_ms=60_000.0)
    sim, res, _ = run({1_000.0: [cmd]})
    second = res.requests.iloc[1]
    assert second["cached_blocks"] == 9  # all but the last block, which is recomputed
    s = res.summary
    assert s["replications"] == 1 and s["bytes_replicated"] == 10 * sim.block_bytes
    assert s["bytes_replicated_used"] == 9 * sim.block_bytes
    assert s["replication_hit_rate"] == 0.9
    assert 3_000.0 < s["mean_lead_time_ms"] < 4_000.0  # landed ~1.2 s, used at 5 s
    assert s["active_evictions_by_speculative"] == 0
    assert s["peak_speculative_bytes_over_quota"] <= 0


def test_replica_not_used_before_its_ttl_is_reclaimed_and_counted_wasted() -> None:
    cmd = ReplicateCommand(source=0, target=1, block_hashes=tuple(CHAIN), ttl_ms=500.0)
    sim, res, _ = run({1_000.0: [cmd]})
    assert res.requests.iloc[1]["cached_blocks"] == 0
    assert res.summary["bytes_wasted"] == 10 * sim.block_bytes
    assert res.summary["bytes_replicated_used"] == 0


def test_replication_copies_only_the_chain_prefix_resident_on_the_source() -> None:
    cmd = ReplicateCommand(source=0, target=1, block_hashes=(0, 1, 999, 3), ttl_ms=60_000.0)
    sim, res, _ = run({1_000.0: [cmd]})
    assert res.summary["bytes_replicated"] == 2 * sim.block_bytes


def test_replicas_respect_the_speculative_quota() -> None:
    tr = tiny_trace([(0.0, 5000, 1, CHAIN), (5_000.0, 5000, 1, CHAIN)])
    cmd = ReplicateCommand(source=0, target=1, block_hashes=tuple(CHAIN), ttl_ms=60_000.0)
    rep = Scripted({1_000.0: [cmd]}, quota_blocks=4)
    sim = Simulator(tr, config(nodes=2, arrival_spread="off"), Pinned([0, 1]), replicator=rep)
    res = sim.run()
    assert res.summary["bytes_replicated"] == 4 * sim.block_bytes
    assert res.requests.iloc[1]["cached_blocks"] == 4


def test_evict_command_drops_speculative_replicas() -> None:
    rep_cmd = ReplicateCommand(source=0, target=1, block_hashes=tuple(CHAIN), ttl_ms=60_000.0)
    evict = EvictCommand(node=1, block_hashes=tuple(CHAIN))
    _, res, _ = run({1_000.0: [rep_cmd], 2_000.0: [evict]})
    assert res.requests.iloc[1]["cached_blocks"] == 0


def promoted_run(quota_blocks: int = 16):
    """One node; CHAIN demoted to DRAM by another request, promoted at 6 s, read at 9 s."""
    other = list(range(100, 112))
    tr = tiny_trace([(0.0, 5000, 1, CHAIN), (2_000.0, 6000, 1, other), (9_000.0, 5000, 1, CHAIN)])
    cfg = config(
        nodes=1,
        arrival_spread="off",
        node={"kv_capacity_gib": 14 * BLOCK_GIB, "dram": {"capacity_gib": 100.0}},
    )
    promote = PromoteCommand(node=0, block_hashes=tuple(CHAIN), ttl_ms=60_000.0)
    rep = Scripted({6_000.0: [promote]}, quota_blocks=quota_blocks)
    return Simulator(tr, cfg, Pinned([0, 0, 0]), replicator=rep).run()


def test_promotion_loads_a_demoted_chain_back_into_hbm_ahead_of_use() -> None:
    res = promoted_run()
    third = res.requests.iloc[2]
    assert third["cached_blocks"] > 0  # found in HBM, not loaded on the critical path
    assert res.summary["bytes_replicated_used"] > 0


def test_promotion_stopped_by_the_quota_leaves_the_rest_in_dram() -> None:
    third = promoted_run(quota_blocks=4).requests.iloc[2]
    # 4 promoted into HBM; the other reusable blocks are still loaded from DRAM, not lost
    # (the last block is always recomputed)
    assert third["cached_blocks"] == 4
    assert third["cached_blocks"] + third["lower_tier_blocks"] == len(CHAIN) - 1


def test_replication_done_names_the_blocks_placed_not_a_prefix_of_those_sent() -> None:
    from kvcast.features.events import BlockStored, ReplicationDone

    tr = tiny_trace([(0.0, 5000, 1, CHAIN), (5_000.0, 5000, 1, CHAIN)])
    short = ReplicateCommand(source=0, target=1, block_hashes=tuple(CHAIN[:5]), ttl_ms=60_000.0)
    full = ReplicateCommand(source=0, target=1, block_hashes=tuple(CHAIN), ttl_ms=60_000.0)
    events: list[object] = []
    sim = Simulator(tr, config(nodes=2, arrival_spread="off"), Pinned([0, 0]),
                    replicator=Scripted({1_000.0: [short, full]}),
                    observers=[events.append])  # fmt: skip
    sim.run()
    done = [e for e in events if isinstance(e, ReplicationDone)]
    stored = [e for e in events if isinstance(e, BlockStored) and e.speculative]
    # both transfers were in flight at once: the second placed only what the first had not
    assert [d.block_hashes for d in done] == [tuple(CHAIN[:5]), tuple(CHAIN[5:])]
    assert sorted(b for e in stored for b in e.block_hashes) == CHAIN


def test_copying_from_a_replica_is_not_a_use_of_it() -> None:
    # every request goes to node 0: no request ever reads a replica on node 1 or node 2
    tr = tiny_trace([(0.0, 5000, 1, CHAIN), (5_000.0, 5000, 1, CHAIN)])
    hop1 = ReplicateCommand(source=0, target=1, block_hashes=tuple(CHAIN), ttl_ms=60_000.0)
    hop2 = ReplicateCommand(source=1, target=2, block_hashes=tuple(CHAIN), ttl_ms=60_000.0)
    rep = Scripted({1_000.0: [hop1], 3_000.0: [hop2]})
    sim = Simulator(tr, config(nodes=3, arrival_spread="off"), Pinned([0, 0]), replicator=rep)
    s = sim.run().summary
    assert s["bytes_replicated"] == 20 * sim.block_bytes
    assert s["bytes_replicated_used"] == 0
    assert len(sim.nodes[1].pool.spec) == 10  # node 1's replicas are still speculative


def test_replicated_bytes_are_used_plus_wasted_plus_alive_on_the_bundled_trace() -> None:
    from kvcast.data import bundled_trace_path
    from kvcast.features.traces import load_trace
    from kvcast.simulator.config import SimConfig
    from kvcast.simulator.replication_policies import make_policy

    cfg = SimConfig()
    trace = load_trace(bundled_trace_path("conversation"), name="conversation")
    sim = Simulator(trace, cfg, make_policy("oracle", cfg), time_scale=2.0)
    s = sim.run().summary
    alive = sum(len(n.pool.spec) for n in sim.nodes) * sim.block_bytes
    assert s["bytes_replicated"] > 0
    assert s["bytes_replicated"] == s["bytes_replicated_used"] + s["bytes_wasted"] + alive

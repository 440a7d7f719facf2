"""A replica the router counted for a request is held for it until the request reads it.

Node 1 is kept busy by a long prompt while the request for CHAIN waits in its queue; the
replica of CHAIN copied there expires (TTL) in the meantime unless the request's claim holds
it."""

from __future__ import annotations

from collections.abc import Iterable

from simtraces import config, tiny_trace

from kvcast.features.events import Event, RequestArrived
from kvcast.predictor.commands import Command, ReplicateCommand
from kvcast.simulator.engine import Simulator
from kvcast.simulator.policies.base import RoutingContext, RoutingDecision

BLOCK_GIB = 0.15625
CHAIN = list(range(10))
LONG = list(range(200, 279))  # 40,000 tokens: node 1 prefills it for about 3 s


class Pinned:
    """Routes request i to the node listed for it (a test router)."""

    name = "pinned"

    def __init__(self, nodes: list[int]) -> None:
        self.nodes, self.i = nodes, 0

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        self.i += 1
        return RoutingDecision(node=self.nodes[self.i - 1])


class Scripted:
    """Copies CHAIN from node 0 to node 1 at 1 s, with a TTL that ends while the request for
    it waits in node 1's queue."""

    tick_ms = 100.0
    speculative_quota_bytes = int(16 * BLOCK_GIB * 2**30)

    def __init__(self) -> None:
        cmd = ReplicateCommand(source=0, target=1, block_hashes=tuple(CHAIN), ttl_ms=2_500.0)
        self.script: dict[float, list[Command]] = {1_000.0: [cmd]}

    def on_tick(self, now_ms: float, sim: Simulator) -> Iterable[Command]:
        return self.script.pop(now_ms, [])


def run(chain_to: int) -> tuple[Simulator, dict[int, dict[int, int]]]:
    """CHAIN at 0 s on node 0, LONG at 2.5 s on node 1, CHAIN again at 3 s on ``chain_to``;
    returns the simulator after the run and, at the third arrival, each pool's claims."""
    tr = tiny_trace([(0.0, 5000, 1, CHAIN), (2_500.0, 40_000, 1, LONG), (3_000.0, 5000, 1, CHAIN)])
    seen: dict[int, dict[int, int]] = {}
    holder: list[Simulator] = []

    def watch(ev: Event) -> None:
        if isinstance(ev, RequestArrived) and ev.ts_ms == 3_000.0:
            seen.update({n.node_id: dict(n.pool.claimed) for n in holder[0].nodes})

    sim = Simulator(
        tr,
        config(nodes=2, arrival_spread="off"),
        Pinned([0, 1, chain_to]),
        replicator=Scripted(),
        observers=[watch],
    )
    holder.append(sim)
    sim.run()
    return sim, seen


def test_a_replica_claimed_by_a_queued_request_outlives_its_ttl_until_it_reads_it() -> None:
    sim, claims = run(chain_to=1)
    res = sim.log
    assert res.prefill_start[2] - res.arrival[2] > 1_000.0  # it waited past the TTL (3.7 s)
    assert res.cached_blocks[2] == 9  # and still read the replica
    assert claims[1] == dict.fromkeys(CHAIN[:9], 1)  # the prefix it counts, not the last block
    pool = sim.nodes[1].pool
    assert pool.spec_hits == 9 and pool.claimed == {}
    assert pool.spec_active_evictions == 0 and sim.speculative_peak_over_quota <= 0


def test_a_request_routed_elsewhere_claims_nothing_and_the_replica_expires_at_its_ttl() -> None:
    sim, claims = run(chain_to=0)
    assert claims == {0: {}, 1: {}}
    pool = sim.nodes[1].pool
    assert pool.spec_hits == 0 and pool.spec_wasted == 10 and not pool.spec

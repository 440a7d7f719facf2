"""The executor's retry after a failed pull: another holder of the chain, never one whose agent
the telemetry poller found down (it keeps the node's transfer address when it marks it down);
an eviction of replicas already gone at their TTL is done, not a dropped command.
Stand-ins answer for the keeper, the event queue and the agent client, so that
only the executor's choice is under test (the real path: test_sidecar_active_agents.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures

from kvcast.serving.sidecar.agent_client import AgentCallError
from kvcast.serving.sidecar.config import AgentClientConfig
from kvcast.serving.sidecar.decisions import Decision
from kvcast.serving.sidecar.executor import Executor
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.replicas import ReplicaTracker


class FakeKeeper:
    def __init__(self, mask: int) -> None:
        self.mask = mask

    def ask(self, fn):  # the keeper answers on its own thread; here at once
        f = concurrent.futures.Future()
        f.set_result(self.mask)
        return f


class FakeQueue:
    def __init__(self) -> None:
        self.events = []

    def put(self, evs, source):
        self.events += evs


class FakeClient:
    """Every pull fails on the source side (not the target agent's fault)."""

    def __init__(self) -> None:
        self.sources: list[str] = []

    async def replicate(self, url, req):
        self.sources.append(req.source)
        return AgentCallError("pull failed: source refused", False)


def _decision() -> Decision:
    return Decision(
        id="d1",
        tick=0,
        ts_ms=0.0,
        mode="active",
        kind="replicate",
        source=0,
        target=3,
        tenant="t",
        block_hashes=(11, 12),
        nbytes=2,
        priority=0,
        ttl_ms=1000.0,
        deadline_ms=float("nan"),
        p_blocks=(0.5, 0.5),
        reason=None,
        text="",
        model="",
        status="pending",
    )


def _executor(client: FakeClient) -> Executor:
    loads = NodeLoads(4, prefill=None, stale_s=5.0)
    loads.transfer = ["10.0.0.0:7000", "10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"]
    loads.agent_up = [True, True, True, True]
    loads.note_agent_down(1)  # node 1's agent stopped answering; its address is kept
    agents = ["http://a0", "http://a1", "http://a2", "http://a3"]
    keeper = FakeKeeper(0b0111)  # nodes 0, 1, 2 hold the whole chain
    return Executor(
        AgentClientConfig(),
        agents,
        loads,
        FakeQueue(),
        ReplicaTracker(),
        keeper,
        client,
        clock_ms=lambda: 0.0,
    )


def test_the_other_holder_is_one_whose_agent_is_up() -> None:
    ex = _executor(FakeClient())
    d = _decision()
    holder = asyncio.run(ex._other_holder(d, exclude=[0]))
    assert holder == 2, f"picked node {holder}, whose agent is down; node 2 is up and holds it"


def test_the_retry_pulls_from_a_live_holder_not_a_down_one() -> None:
    client = FakeClient()
    ex = _executor(client)
    d = _decision()

    async def go():
        ex.bind(asyncio.get_running_loop())
        await ex._run(d)

    asyncio.run(go())
    assert client.sources[0] == "10.0.0.0:7000"
    assert client.sources[1:] == ["10.0.0.2:7000"], f"retry pulled from {client.sources[1:]}"


class EvictClient:
    def __init__(self) -> None:
        self.evicts: list[object] = []

    async def evict(self, url, req):
        self.evicts.append(req)
        raise AssertionError("nothing is left to evict")


def test_an_eviction_of_replicas_already_expired_is_done_and_asks_no_agent() -> None:
    """The decider orders a replica evicted at its TTL; the sidecar's replica view forgot it at
    that TTL too (its agent reclaims it itself): nothing is left to do, and nothing failed."""
    from kvcast.serving.sidecar.replicas import ReplicaTracker

    now = [0.0]
    replicas = ReplicaTracker(clock=lambda: now[0])
    replicas.place(3, [11, 12], "t", 1, ttl_s=1.0)
    now[0] = 2.0
    assert replicas.sweep() == [(3, 11), (3, 12)]
    client = EvictClient()
    loads = NodeLoads(4, prefill=None, stale_s=5.0)
    ex = Executor(AgentClientConfig(), ["http://a0"] * 4, loads, FakeQueue(), replicas,
                  FakeKeeper(0), client, clock_ms=lambda: 0.0)  # fmt: skip
    d = _decision()
    d.kind = "evict"
    asyncio.run(ex._evict(d, "http://a3"))
    assert d.status == "done" and not client.evicts
    assert sum(ex.dropped.values()) == 0 and ex.evictions == 0

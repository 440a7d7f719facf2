"""A replica the agent drops on its own leaves the sidecar's view at the next telemetry poll,
not at its TTL: real ``kvcast serve agent`` processes on loopback, a real replication.

Node a holds a hot chain and is busy; the sidecar (active) copies it to the idle node b. Then
b's engine stores blocks of its own until b's agent must evict the speculative replica to make
room. The sidecar reads the agent's removals: the replica is no longer live, no longer a
location of its blocks, and the decider's ledger no longer counts it (the chain may be copied
again). Likewise when b's agent is killed and started again: its new store holds nothing of
the old, which the sidecar learns from the agent's new incarnation."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx
from agent_blocks import BLOCK, put_blocks
from serve_processes import AGENT_READY, start_agent
from sidecar_harness import (
    AUTH,
    TOKEN,
    chain,
    hot_chain_on_node_a,
    open_sidecar,
    settle,
    sidecar_config,
    tick,
)

from kvcast.serving.cluster.summary import parse_metrics


def token_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {"KVCAST_TOKEN": TOKEN}


def start_a_and_b(agents: list[Any], env: dict[str, str]) -> list[Any]:
    """Agents of node a and (small) node b, started and ready; their ready-line matches."""
    agents.append(start_agent("node-a", env))
    agents.append(small_b(env))
    return [agent.wait_ready(AGENT_READY) for agent in agents]


def small_b(env: dict[str, str], *extra: str) -> Any:
    """Node b's agent: room for the copy and little more."""
    return start_agent("node-b", env, "--capacity", "4MiB", "--speculative-quota", "2MiB", *extra)


async def replicate_a_to_b(
    tmp_path: Path, model_path: Path, a: str, b: str, hashes: list[int], http: httpx.AsyncClient,
    sc: Any, client: httpx.AsyncClient,
) -> None:  # fmt: skip
    """The hot chain on busy node a, copied by the sidecar to idle node b."""
    await put_blocks(http, a, hashes, AUTH, tenant="acme")
    await hot_chain_on_node_a(client, hashes, tenant="acme")
    stats = {"engine_id": "vllm-0", "queue_depth": 4}
    assert (await http.post(f"{a}/v1/engine-stats", json=stats, headers=AUTH)).is_success
    async with asyncio.timeout(10):
        while not (all(sc.loads.transfer) and sc.loads.queue_depth(0) == 4):
            await asyncio.sleep(0.05)
    await settle(sc)
    made = await tick(sc)
    assert [(d.kind, d.target) for d in made] == [("replicate", 1)]
    async with asyncio.timeout(15):
        while made[0].status not in ("done", "dropped"):
            await asyncio.sleep(0.05)
    assert made[0].status == "done", made[0]
    assert len(sc.replicas) == len(hashes)
    assert sc.decider.ledger.has_replica(hashes[-1])
    await settle(sc)
    assert "node-b" in (await client.get(f"/v1/blocks/{hashes[0]}", headers=AUTH)).json()["gpu"]


def config_for(tmp_path: Path, model_path: Path, a: str, b: str) -> Any:
    nodes = [{"name": "node-a", "agent": a}, {"name": "node-b", "agent": b}]
    decider = tmp_path / "decider-small-nodes.yaml"  # b's whole quota may hold the copy
    decider.write_text(
        "costs:\n  safety_margin_gib: 0.0\nbudgets:\n  speculative_quota_fraction: 1.0\n"
    )
    return sidecar_config(tmp_path, nodes=nodes, model=str(model_path), token=TOKEN,
                          mode="active", decider=str(decider))  # fmt: skip


def test_a_replica_the_agent_evicted_for_room_leaves_the_view_and_the_ledger(
    tmp_path, run, model_path, agents
) -> None:
    env = token_env()
    start_a_and_b(agents, env)
    a, b = (agent.http for agent in agents)
    hashes = chain(1)

    async def main() -> None:
        cfg = config_for(tmp_path, model_path, a, b)
        async with httpx.AsyncClient(timeout=10.0) as http, open_sidecar(cfg) as (sc, client):
            await replicate_a_to_b(tmp_path, model_path, a, b, hashes, http, sc, client)

            # b's engine fills its memory: the agent evicts the replica (speculative first)
            own = [(9 << 32) + i for i in range(16)]
            await put_blocks(http, b, own, AUTH, tenant="acme")
            async with asyncio.timeout(10):
                while sc.replicas_lost_on_agents < len(hashes):
                    await asyncio.sleep(0.05)
            assert len(sc.replicas) == 0
            await settle(sc)
            where = (await client.get(f"/v1/blocks/{hashes[0]}", headers=AUTH)).json()
            assert where["gpu"] == ["node-a"] and where["replicas"] == []
            await tick(sc)  # the decider hears of it at its next tick
            assert not sc.decider.ledger.has_replica(hashes[-1])
            mine = parse_metrics((await client.get("/metrics")).text)
            mb = parse_metrics((await http.get(f"{b}/metrics")).text)

        assert mine["kvcast_sidecar_replicas_lost_on_agents_total"] == len(hashes)
        assert mine["kvcast_sidecar_agent_removals_read_total"] == len(hashes)
        assert mine["kvcast_sidecar_agent_removals_missed_total"] == 0
        assert mine["kvcast_sidecar_replicas_wasted_total"] == len(hashes)
        assert mb["kvcast_agent_store_bytes{state=speculative}"] == 0
        assert mb["kvcast_agent_store_bytes{state=cached}"] == 16 * BLOCK

    run(main(), timeout=60.0)
    for agent in agents:
        agent.proc.send_signal(signal.SIGTERM)
    for agent in agents:
        assert agent.wait() == 0, "".join(agent.log)


def test_replicas_on_an_agent_that_restarted_leave_the_view_at_its_first_answer(
    tmp_path, run, model_path, agents
) -> None:
    """b's agent is killed (SIGKILL) and started again on the same addresses: its new store
    holds none of the replicas. Its removal numbers start at 0 as before, so only its new
    incarnation tells; the replicas leave the view and the ledger at the first poll that
    reaches the new life, not at their TTL."""
    env = token_env()
    ready = start_a_and_b(agents, env)
    a, b = (agent.http for agent in agents)
    hashes = chain(1)

    async def main() -> None:
        cfg = config_for(tmp_path, model_path, a, b)
        async with httpx.AsyncClient(timeout=10.0) as http, open_sidecar(cfg) as (sc, client):
            await replicate_a_to_b(tmp_path, model_path, a, b, hashes, http, sc, client)
            agents[1].kill()
            again = small_b(env, "--listen", ready[1].group(2), "--transfer-listen",
                            ready[1].group(3))  # fmt: skip
            agents.append(again)
            await asyncio.to_thread(again.wait_ready, AGENT_READY)
            async with asyncio.timeout(15):
                while len(sc.replicas):
                    await asyncio.sleep(0.05)
            await settle(sc)
            where = (await client.get(f"/v1/blocks/{hashes[0]}", headers=AUTH)).json()
            assert where["gpu"] == ["node-a"] and where["replicas"] == []
            await tick(sc)
            assert not sc.decider.ledger.has_replica(hashes[-1])
            mine = parse_metrics((await client.get("/metrics")).text)

        assert mine["kvcast_sidecar_agent_restarts_total{node=node-b}"] == 1
        assert mine["kvcast_sidecar_replicas_lost_on_agents_total"] == len(hashes)

    run(main(), timeout=60.0)

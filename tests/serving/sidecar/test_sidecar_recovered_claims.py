"""Claims across a sidecar restart, against two real ``kvcast serve agent`` processes on
loopback, in active mode.

Node b holds replicas of chains 1 and 2 (pulled from node a, TTL 3 s). A first sidecar
recovers them at its start; requests r-1 (chain 1) and r-2 (chain 2) routed to node b claim
them, and node b's agent holds them. That sidecar stops; a second one starts: it takes the
claims back from node b's inventory, so it keeps the replicas in view past their TTL (as the
agent keeps them), and when node b's engine stores chain 1 it releases r-1's holds on the
agent, which then lets chain 1 expire. Chain 2's hold runs out at ``claim_hold_s`` in both."""

from __future__ import annotations

import asyncio
import os
import secrets
import time

import httpx
from agent_blocks import TENANT, inventory, put_blocks
from serve_processes import AGENT_READY, start_agent
from sidecar_harness import CHAIN_BLOCKS, chain, engine_stored, open_sidecar, sidecar_config

TTL_S, HOLD_S = 3.0, 6.0


def test_a_restarted_sidecar_takes_back_the_claims_its_agents_hold(tmp_path, run, agents) -> None:
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {"KVCAST_TOKEN": token}
    agents += [start_agent(name, env) for name in ("node-a", "node-b")]
    transfer_a = agents[0].wait_ready(AGENT_READY).group(3)
    agents[1].wait_ready(AGENT_READY)
    a, b = (agent.http for agent in agents)
    auth = {"Authorization": f"Bearer {token}"}
    c1, c2 = chain(1), chain(2)
    nodes = [{"name": "node-a", "agent": a}, {"name": "node-b", "agent": b}]

    def config(life: str) -> object:
        log = {"path": str(tmp_path / f"decisions-{life}.parquet"), "rows_per_chunk": 2}
        return sidecar_config(
            tmp_path, nodes=nodes, token=token, mode="active", decision_log=log,
            agents={"telemetry_period_s": 0.2, "timeout_s": 5.0, "claim_hold_s": HOLD_S},
        )  # fmt: skip

    def arrival(rid: str, hashes: list[int]) -> dict:
        return {"request_id": rid, "node": "node-b", "tenant": TENANT, "block_hashes": hashes,
                "input_tokens": CHAIN_BLOCKS * 512 + 100}  # fmt: skip

    async def main() -> None:
        async with httpx.AsyncClient(timeout=10.0) as http:
            await put_blocks(http, a, c1 + c2, auth)
            pull = {"command_id": "copy-1", "source": transfer_a, "tenant": TENANT,
                    "block_hashes": c1 + c2, "deadline_s": 10.0, "ttl_s": TTL_S}  # fmt: skip
            r = (await http.post(f"{b}/v1/replicate", json=pull, headers=auth)).json()
            assert r["status"] == "ok", r
            landed = time.monotonic()

            async with open_sidecar(config("first")) as (sc, client):  # the first life
                assert sc.recovery.replicas == 2 * CHAIN_BLOCKS and sc.recovery.claimed == 0
                async with asyncio.timeout(5):
                    while not sc.loads.agent_up[1]:
                        await asyncio.sleep(0.05)
                routed = {"requests": [arrival("r-1", c1), arrival("r-2", c2)]}
                assert (await client.post("/v1/requests", json=routed,
                                          headers=auth)).status_code == 202  # fmt: skip
                claimed_at = time.monotonic()
                async with asyncio.timeout(5):
                    while sc.executor.claims["held"] < 2 * CHAIN_BLOCKS:
                        await asyncio.sleep(0.05)

            held = await inventory(http, b, auth)  # what the second life will read
            for hashes, rid in ((c1, "r-1"), (c2, "r-2")):
                for h in hashes:
                    [claim] = held[h]["claims"]
                    assert claim["claim_id"] == rid and held[h]["holds"] == 1
                    assert 0.0 < claim["seconds_left"] <= HOLD_S

            async with open_sidecar(config("second")) as (sc, client):  # after the restart
                assert sc.recovery.replicas == 2 * CHAIN_BLOCKS
                assert sc.recovery.claimed == 2 * CHAIN_BLOCKS
                async with asyncio.timeout(5):
                    while not sc.loads.agent_up[1]:
                        await asyncio.sleep(0.05)
                await asyncio.sleep(max(TTL_S + 0.3 - (time.monotonic() - landed), 0.0))
                assert sc.expire_replicas() == 0  # past their TTL: held, kept in view
                assert sorted(await inventory(http, b, auth)) == sorted(c1 + c2)  # and there

                # node b's engine read chain 1 and stored it: the second life releases r-1
                await engine_stored(client, sc, "node-b", c1, auth, CHAIN_BLOCKS)
                assert sorted(await inventory(http, b, auth)) == sorted(c2)  # c1 expired now
                assert sc.expire_replicas() == 0 and sc.replicas.nodes_of(c2[0]) == [1]

                # chain 2's engine event never comes: r-2's hold runs out at claim_hold_s
                await asyncio.sleep(max(HOLD_S + 0.3 - (time.monotonic() - claimed_at), 0.0))
                assert await inventory(http, b, auth) == {}
                sc.expire_replicas()  # (or the agent's removals, polled, said so first)
                assert sc.replicas.nodes_of(c2[0]) == [] and not sc.replicas

    run(main(), timeout=60.0)

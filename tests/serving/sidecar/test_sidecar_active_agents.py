"""Active mode against three real ``kvcast serve agent`` processes on loopback.

The engines' role: each node's blocks are stored into its agent (``PUT /v1/blocks``) and
announced as KV events, queue depths reported to the agents (which the sidecar polls); the
router's role: the arrivals. Nodes a and c are busy, b idle, so the decider copies the hot
chains to b. In shadow mode nothing moves.
Switched to active: chain 1 is pulled from a; chain 2, which a announced but does not hold,
fails there and is retried from c; chain 3, held nowhere, is dropped with its reason. Every
replicated block's checksum equals the source's, and the sidecar's metrics agree with the
agents'."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal

import httpx
from agent_blocks import BLOCK, TENANT, checksums, put_blocks
from serve_processes import AGENT_READY, start_agent
from sidecar_harness import CHAIN_BLOCKS, chain, open_sidecar, settle, sidecar_config, tick

from kvcast.serving.cluster.summary import parse_metrics


def test_active_mode_moves_verified_bytes_retries_elsewhere_and_drops_with_a_reason(
    tmp_path, run, model_path, agents
) -> None:
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {"KVCAST_TOKEN": token}
    agents += [start_agent(name, env) for name in ("node-a", "node-b", "node-c")]
    for agent in agents:
        agent.wait_ready(AGENT_READY)
    a, b, c = (agent.http for agent in agents)
    auth = {"Authorization": f"Bearer {token}"}
    c1, c2, c3 = chain(1), chain(2), chain(3)

    async def main() -> None:
        nodes = [{"name": n, "agent": url} for n, url in zip(("node-a", "node-b", "node-c"),
                                                               (a, b, c), strict=True)]  # fmt: skip
        cfg = sidecar_config(tmp_path, nodes=nodes, model=str(model_path), token=token)
        async with httpx.AsyncClient(timeout=10.0) as http, open_sidecar(cfg) as (sc, client):
            sums = await put_blocks(http, a, c1, auth)  # a lacks chains 2 and 3
            sums |= await put_blocks(http, c, c2, auth)
            stored = [{"type": "BlockStored", "block_hashes": h, "block_size": 512}
                      for h in (c1, c2, c3)]  # fmt: skip
            for node, events in (("node-a", stored), ("node-c", stored[1:2])):
                r = await client.post("/v1/kv-events", json={"node": node, "events": events},
                                      headers=auth)  # fmt: skip
                assert r.status_code == 202
            arrivals = [
                {"request_id": f"r{i}-{node}", "node": node, "tenant": TENANT,
                 "block_hashes": h, "input_tokens": CHAIN_BLOCKS * 512 + 100}
                for i, h in enumerate((c1, c2, c3)) for node in ("node-a", "node-c")
            ]  # fmt: skip
            r = await client.post("/v1/requests", json={"requests": arrivals}, headers=auth)
            assert r.status_code == 202
            for busy in (a, c):  # the engines of a and c report 4 waiting requests
                stats = {"engine_id": "vllm-0", "queue_depth": 4}
                r = await http.post(f"{busy}/v1/engine-stats", json=stats, headers=auth)
                assert r.status_code == 204
            async with asyncio.timeout(10):  # the sidecar polls the agents' telemetry
                while not (all(sc.loads.transfer) and sc.loads.queue_depth(2) == 4):
                    await asyncio.sleep(0.05)
            await settle(sc)

            shadow = await tick(sc)
            assert len(shadow) == 3 and {d.status for d in shadow} == {"shadow"}
            await asyncio.sleep(0.3)
            assert await checksums(http, b, auth) == {} and sc.executor.issued == 0

            r = await client.post("/v1/mode", json={"mode": "active"}, headers=auth)
            assert r.json() == {"mode": "active"}
            made = {d.block_hashes[0]: d for d in await tick(sc)}
            assert sorted(made) == sorted(h[0] for h in (c1, c2, c3))
            assert {d.target for d in made.values()} == {1}
            async with asyncio.timeout(15):
                while any(d.status not in ("done", "dropped") for d in made.values()):
                    await asyncio.sleep(0.05)
            d1, d2, d3 = made[c1[0]], made[c2[0]], made[c3[0]]
            assert (d1.status, d1.attempts) == ("done", 1), d1
            assert (d2.status, d2.attempts, d2.history) == ("done", 2, [
                "issued", "retried", "issued", "done"]), d2  # fmt: skip
            assert d3.status == "dropped" and "no other node holds the chain" in d3.detail

            held = await checksums(http, b, auth)
            assert held == {h: sums[h] for h in (*c1, *c2)}  # bytes verified: source checksums
            sources = await checksums(http, a, auth) | await checksums(http, c, auth)
            assert held == {h: sources[h] for h in held}
            await settle(sc)
            where = (await client.get(f"/v1/blocks/{c2[0]}", headers=auth)).json()
            assert where["gpu"] == ["node-a", "node-b", "node-c"]
            assert where["replicas"] == ["node-b"]

            used = {"request_id": "r-b", "node": "node-b", "tenant": TENANT, "block_hashes": c1,
                    "input_tokens": CHAIN_BLOCKS * 512 + 100}  # fmt: skip
            await client.post("/v1/requests", json={"requests": [used]}, headers=auth)
            await settle(sc)
            mine = parse_metrics((await client.get("/metrics")).text)
            ma, mb, mc = [parse_metrics((await http.get(f"{u}/metrics")).text) for u in (a, b, c)]

        moved = 2 * CHAIN_BLOCKS * BLOCK
        assert mine["kvcast_sidecar_replications_issued_total"] == 3
        assert mine["kvcast_sidecar_replications_done_total"] == 2
        assert mine["kvcast_sidecar_replications_retried_total"] == 1
        assert mine["kvcast_sidecar_replications_failed_total{reason=pull}"] == 2
        assert mine["kvcast_sidecar_commands_dropped_total{reason=failed}"] == 1
        assert mine["kvcast_sidecar_replicated_bytes_total"] == moved
        assert mine["kvcast_sidecar_replicas_placed_total"] == 2 * CHAIN_BLOCKS
        assert mine["kvcast_sidecar_replicas_used_total"] == CHAIN_BLOCKS
        assert mine["kvcast_sidecar_replica_hit_rate"] == 1.0
        assert mb["kvcast_agent_bytes_pulled_total"] == moved
        served = [m["kvcast_agent_bytes_served_total"] for m in (ma, mc)]
        assert served == [CHAIN_BLOCKS * BLOCK] * 2
        assert mb["kvcast_agent_checksum_failures_total"] == 0
        assert mb["kvcast_agent_store_bytes{state=speculative}"] == moved
        assert mb["kvcast_agent_speculative_quota_bytes"] >= moved

    run(main(), timeout=60.0)
    for agent in agents:  # all at once: each takes a moment to shut down
        agent.proc.send_signal(signal.SIGTERM)
    for agent in agents:
        assert agent.wait() == 0, "".join(agent.log)

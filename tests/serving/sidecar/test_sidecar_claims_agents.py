"""Claims against two real ``kvcast serve agent`` processes on loopback, in active mode.

Node a holds chains 1 and 2 and is busy: the decider copies both to node b with a 2.5 s
TTL. Requests for both chains are then routed to node b (and one for chain 1 to node a):
node b's agent holds the replicas for them past their TTL, and the decider orders no
eviction. When node b's engine stores chain 1 (it read it) the sidecar releases those holds
and the replicas expire at once; chain 2's engine event never comes, so its hold runs out
at ``claim_hold_s`` and the replicas expire then. A request routed to node b while its
replica is still on its way there (node b's link slowed) claims it when it lands."""

from __future__ import annotations

import asyncio
import os
import secrets
import time

import httpx
from agent_blocks import TENANT, inventory, put_blocks
from serve_processes import AGENT_READY, start_agent
from sidecar_harness import (
    CHAIN_BLOCKS,
    chain,
    engine_stored,
    open_sidecar,
    settle,
    sidecar_config,
    tick,
)

from kvcast.serving.cluster.summary import parse_metrics

TTL_S, HOLD_S = 2.5, 5.0
RATE = 2 << 20  # node b's per-link limit in the in-flight test, bytes/s: a chain takes ~1 s


def arrival(rid: str, node: str, hashes: list[int]) -> dict:
    return {"request_id": rid, "node": node, "tenant": TENANT, "block_hashes": hashes,
            "input_tokens": CHAIN_BLOCKS * 512 + 100}  # fmt: skip


def claims_cluster(tmp_path, model_path, agents, *b_flags: str) -> tuple:
    """Agents node-a and node-b (``b_flags``: its extra flags), their token, and the sidecar's
    config: active mode, TTL_S replicas, HOLD_S claims."""
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {"KVCAST_TOKEN": token}
    agents += [start_agent("node-a", env), start_agent("node-b", env, *b_flags)]
    for agent in agents:
        agent.wait_ready(AGENT_READY)
    a, b = (agent.http for agent in agents)
    decider = tmp_path / "decider-claims.yaml"
    decider.write_text(f"costs:\n  safety_margin_gib: 0.0\nbudgets:\n  ttl_ms: {TTL_S * 1e3}\n")
    nodes = [{"name": "node-a", "agent": a}, {"name": "node-b", "agent": b}]
    cfg = sidecar_config(
        tmp_path, nodes=nodes, model=str(model_path), token=token, decider=str(decider),
        mode="active", agents={"telemetry_period_s": 0.2, "claim_hold_s": HOLD_S},
    )  # fmt: skip
    return a, b, {"Authorization": f"Bearer {token}"}, cfg


async def copy_hot_chains(
    sc, client: httpx.AsyncClient, http: httpx.AsyncClient, a: str, auth: dict,
    chains: list[list[int]],
) -> list:  # fmt: skip
    """Node a's engine holds ``chains`` (in its agent too), requests for them arrived there
    and it is busy: the decider's next tick copies each to node b; its replicate decisions."""
    await put_blocks(http, a, [h for c in chains for h in c], auth)
    stored = [{"type": "BlockStored", "block_hashes": h, "block_size": 512} for h in chains]
    r = await client.post("/v1/kv-events", json={"node": "node-a", "events": stored},
                          headers=auth)  # fmt: skip
    assert r.status_code == 202
    hot = [arrival(f"hot-{i}", "node-a", h) for i, h in enumerate(chains)]
    assert (await client.post("/v1/requests", json={"requests": hot},
                              headers=auth)).status_code == 202  # fmt: skip
    stats = {"engine_id": "vllm-0", "queue_depth": 4}
    assert (await http.post(f"{a}/v1/engine-stats", json=stats,
                            headers=auth)).status_code == 204  # fmt: skip
    async with asyncio.timeout(10):
        while not (all(sc.loads.transfer) and sc.loads.queue_depth(0) == 4):
            await asyncio.sleep(0.05)
    await settle(sc)
    made = [d for d in await tick(sc) if d.kind == "replicate"]
    assert sorted(d.block_hashes[0] for d in made) == sorted(c[0] for c in chains)
    return made


def test_routed_requests_hold_their_replicas_on_the_agent_until_their_engine_stores_them(
    tmp_path, run, model_path, agents
) -> None:
    a, b, auth, cfg = claims_cluster(tmp_path, model_path, agents)
    c1, c2 = chain(1), chain(2)

    async def main() -> None:
        async with httpx.AsyncClient(timeout=10.0) as http, open_sidecar(cfg) as (sc, client):
            made = await copy_hot_chains(sc, client, http, a, auth, [c1, c2])
            assert {d.target for d in made} == {1}
            async with asyncio.timeout(10):
                while any(d.status not in ("done", "dropped") for d in made):
                    await asyncio.sleep(0.05)
            assert {d.status for d in made} == {"done"}
            landed = time.monotonic()
            held = await inventory(http, b, auth)
            assert sorted(held) == sorted(c1 + c2)
            assert {x["state"] for x in held.values()} == {"speculative"}
            assert {x["holds"] for x in held.values()} == {0}

            routed = [arrival("r-b1", "node-b", c1), arrival("r-b2", "node-b", c2),
                      arrival("r-a1", "node-a", c1)]  # fmt: skip
            assert (await client.post("/v1/requests", json={"requests": routed},
                                      headers=auth)).status_code == 202  # fmt: skip
            claimed_at = time.monotonic()
            async with asyncio.timeout(5):  # the executor asks node b's agent to hold them
                while sc.executor.claims["held"] < 2 * CHAIN_BLOCKS:
                    await asyncio.sleep(0.05)
            held = await inventory(http, b, auth)
            assert {x["holds"] for x in held.values()} == {1}  # r-a1 claimed nothing on b

            await asyncio.sleep(max(TTL_S + 0.5 - (time.monotonic() - landed), 0.0))
            await settle(sc)
            assert sc.expire_replicas() == 0  # past their TTL, still in the sidecar's view
            later = await tick(sc)
            assert [d for d in later if d.kind == "evict"] == []  # no eviction ordered
            held = await inventory(http, b, auth)
            assert sorted(held) == sorted(c1 + c2)  # and still on node b, past their TTL

            # node b's engine read chain 1 and stored it: its holds end, it expires now
            await engine_stored(client, sc, "node-b", c1, auth, CHAIN_BLOCKS)
            assert sorted(await inventory(http, b, auth)) == sorted(c2)

            # chain 2's engine event never comes: its hold runs out at claim_hold_s
            await asyncio.sleep(max(HOLD_S + 0.3 - (time.monotonic() - claimed_at), 0.0))
            assert await inventory(http, b, auth) == {}
            removals = (await http.get(f"{b}/v1/removals", headers=auth)).json()["blocks"]
            assert sorted(x["block_hash"] for x in removals if x["reason"] == "expired") == sorted(
                c1 + c2
            )
            mine = parse_metrics((await client.get("/metrics")).text)
            mb = parse_metrics((await http.get(f"{b}/metrics")).text)

        assert mine["kvcast_sidecar_replica_claims_total{outcome=held}"] == 2 * CHAIN_BLOCKS
        assert mine["kvcast_sidecar_replica_claims_total{outcome=released}"] == CHAIN_BLOCKS
        assert mb["kvcast_agent_store_holds_total{event=held}"] == 2 * CHAIN_BLOCKS
        assert mb["kvcast_agent_store_holds_total{event=evicted}"] == 0

    run(main(), timeout=60.0)


def test_a_replica_on_its_way_when_its_request_is_routed_is_claimed_when_it_lands(
    tmp_path, run, model_path, agents
) -> None:
    limits = tmp_path / "b.yaml"
    limits.write_text(f"link_bytes_per_s: {RATE}\nlink_burst_bytes: {256 << 10}\n")
    a, b, auth, cfg = claims_cluster(tmp_path, model_path, agents, "--config", str(limits))
    c1 = chain(1)

    async def main() -> None:
        async with httpx.AsyncClient(timeout=10.0) as http, open_sidecar(cfg) as (sc, client):
            [d] = await copy_hot_chains(sc, client, http, a, auth, [c1])
            async with asyncio.timeout(5):  # node b is pulling it (about a second at RATE)
                while d.status != "issued":
                    await asyncio.sleep(0.01)
            routed = {"requests": [arrival("r-b1", "node-b", c1)]}
            assert (await client.post("/v1/requests", json=routed,
                                      headers=auth)).status_code == 202  # fmt: skip
            assert d.status == "issued" and sc.executor.claims["held"] == 0  # still on its way
            async with asyncio.timeout(10):
                while d.status not in ("done", "dropped"):
                    await asyncio.sleep(0.05)
            assert d.status == "done", d.detail
            landed = time.monotonic()
            async with asyncio.timeout(5):  # landed: held for r-b1 now
                while sc.executor.claims["held"] < CHAIN_BLOCKS:
                    await asyncio.sleep(0.05)
            held = await inventory(http, b, auth)
            assert sorted(held) == sorted(c1)
            assert {c["claim_id"] for x in held.values() for c in x["claims"]} == {"r-b1"}

            await asyncio.sleep(max(TTL_S + 0.5 - (time.monotonic() - landed), 0.0))
            await settle(sc)
            assert sc.expire_replicas() == 0  # past their TTL, held: kept in view
            assert sorted(await inventory(http, b, auth)) == sorted(c1)  # and on node b

            await engine_stored(client, sc, "node-b", c1, auth, CHAIN_BLOCKS)
            assert await inventory(http, b, auth) == {}  # released: its TTL had passed

    run(main(), timeout=60.0)

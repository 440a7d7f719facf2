"""The sidecar on inputs that once broke it: a copy's tenant when two tenants send one chain,
only a public prefix copied to another tenant's node, a timestamp in the wrong unit, an
oversized public prefix, vLLM's own event fields over HTTP, a mode switch in the middle of a
tick, and recovery of blocks held under bytes hashes."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from sidecar_harness import (
    BLOCK_TOKENS,
    chain,
    hot_chain_on_node_a,
    open_sidecar,
    settle,
    sidecar_config,
    telemetry,
    tick,
)

from kvcast.features.events import BlockStored
from kvcast.serving.agent import AgentConfig, BlockState, HostBuffer, checksum
from kvcast.serving.agent.service import AgentService
from kvcast.serving.kv_events import hash_from_wire
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.recovery import recover_locations
from kvcast.serving.sidecar.replicas import ReplicaTracker


def with_telemetry(sc, cfg) -> None:  # type: ignore[no-untyped-def]
    for i, name in enumerate(cfg.node_names):
        sc.loads.note_telemetry(i, telemetry(name))


def test_a_copy_carries_the_tenant_whose_chain_it_is(tmp_path, run, model_path) -> None:
    async def main() -> None:
        nodes = [{"name": "node-a"}, {"name": "node-b", "tenants": ["beta"]}]
        cfg = sidecar_config(tmp_path, model=str(model_path), nodes=nodes)
        async with open_sidecar(cfg) as (sc, client):
            with_telemetry(sc, cfg)
            hashes = chain()
            await hot_chain_on_node_a(client, hashes, tenant="beta")
            other = {"request_id": "r-2", "node": "node-a", "tenant": "acme", "session": "s-2",
                     "block_hashes": hashes, "input_tokens": len(hashes) * BLOCK_TOKENS + 100,
                     "output_tokens": 64, "queue_depth": 4}  # fmt: skip
            assert (
                await client.post("/v1/requests", json={"requests": [other]})
            ).status_code == 202
            await settle(sc)
            copies = [d for d in await tick(sc) if d.kind == "replicate" and d.target == 1]
            assert copies and all(d.tenant == "beta" for d in copies)  # node-b serves beta only

    run(main())


def test_only_a_chains_public_prefix_is_copied_to_a_node_of_other_tenants(
    tmp_path, run, model_path
) -> None:
    """Node b serves beta only: acme's hot chain goes there only as far as its public prefix
    (none of it when it has none), and as acme's blocks (the agent keys them by tenant)."""

    async def copies(public: int) -> list[tuple[int, str, int]]:
        nodes = [{"name": "node-a"}, {"name": "node-b", "tenants": ["beta"]}]
        cfg = sidecar_config(tmp_path, model=str(model_path), nodes=nodes)
        async with open_sidecar(cfg) as (sc, client):
            with_telemetry(sc, cfg)
            hashes = chain()
            stored = {"type": "BlockStored", "block_hashes": hashes, "block_size": BLOCK_TOKENS}
            r = await client.post("/v1/kv-events", json={"node": "node-a", "events": [stored]})
            assert r.status_code == 202, r.text
            arrival = {"request_id": "r-1", "node": "node-a", "tenant": "acme", "session": "s",
                       "block_hashes": hashes, "input_tokens": len(hashes) * BLOCK_TOKENS + 100,
                       "output_tokens": 64, "queue_depth": 4, "public_blocks": public}  # fmt: skip
            r = await client.post("/v1/requests", json={"requests": [arrival]})
            assert r.status_code == 202, r.text
            await settle(sc)
            made = await tick(sc)
            return [
                (d.target, d.tenant, len(d.block_hashes)) for d in made if d.kind == "replicate"
            ]

    assert run(copies(0)) == []
    assert run(copies(3)) == [(1, "acme", 3)]


def test_a_timestamp_far_ahead_of_the_clock_is_a_422_and_the_stream_goes_on(
    tmp_path, run, model_path
) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, model=str(model_path))
        async with open_sidecar(cfg) as (sc, client):
            with_telemetry(sc, cfg)
            micro = {"request_id": "us", "node": "node-b", "tenant": "zed", "block_hashes": [9],
                     "input_tokens": 10, "ts_ms": time.time() * 1e6}  # microseconds  # fmt: skip
            r = await client.post("/v1/requests", json={"requests": [micro]})
            assert r.status_code == 422 and "ahead of the sidecar's clock" in r.text
            kv = {"node": 0, "ts_ms": time.time() * 1e6, "events": [{"type": "AllBlocksCleared"}]}
            assert (await client.post("/v1/kv-events", json=kv)).status_code == 422
            await hot_chain_on_node_a(client, chain(1))
            await settle(sc)
            assert [d.kind for d in await tick(sc)] == ["replicate"]

    run(main())


def test_a_public_prefix_longer_than_any_chain_is_a_422(tmp_path, run) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (_, client):
            bad = {"request_id": "bad", "node": "node-a", "tenant": "zed", "public_blocks": 2**63,
                   "block_hashes": chain(7), "input_tokens": 4096}  # fmt: skip
            r = await client.post("/v1/requests", json={"requests": [bad]})
            assert r.status_code == 422 and "public_blocks" in r.text

    run(main())


def test_a_wrong_json_type_is_a_422_never_converted(tmp_path, run) -> None:
    """``"node": true`` was read as node 1 (and ``"input_tokens": true`` as 1 token): a JSON
    boolean, a string or a fractional number where an integer belongs is refused."""

    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, client):
            good = {"request_id": "r", "node": 0, "tenant": "zed", "block_hashes": chain(2),
                    "input_tokens": 32}  # fmt: skip
            for key, value in [("node", True), ("node", False), ("node", 1.0),
                               ("input_tokens", True), ("input_tokens", "32"),
                               ("queue_depth", 1.5)]:  # fmt: skip
                r = await client.post("/v1/requests", json={"requests": [good | {key: value}]})
                assert r.status_code == 422, (key, value, r.text)
                assert f"body.requests.0.{key}" in r.json()["error"], r.text
            kv = {"node": True, "events": [{"type": "AllBlocksCleared"}]}
            r = await client.post("/v1/kv-events", json=kv)
            assert r.status_code == 422 and "body.node" in r.json()["error"], r.text
            stored = {"type": "BlockStored", "block_hashes": [1], "block_size": True}
            r = await client.post("/v1/kv-events", json={"node": 0, "events": [stored]})
            assert r.status_code == 422 and "block_size" in r.json()["error"], r.text
            assert len(sc.queue) == 0 and sc.queue.accepted["http"] == 0
            r = await client.post("/v1/requests", json={"requests": [good | {"ts_ms": 12.0}]})
            assert r.status_code == 202, r.text  # an integer or a float is a float

    run(main())


def test_a_timestamp_absurdly_far_ahead_is_refused_in_one_short_line(tmp_path, run) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (_, client):
            bad = {"request_id": "r", "node": 0, "tenant": "zed", "block_hashes": chain(1),
                   "input_tokens": 16, "ts_ms": 1e300}  # fmt: skip
            r = await client.post("/v1/requests", json={"requests": [bad]})
            assert r.status_code == 422 and "ahead of the sidecar's clock" in r.text
            assert "1e+300" in r.json()["error"] and len(r.json()["error"]) < 200, r.text

    run(main())


def test_vllm_map_events_over_http_are_accepted_with_their_own_fields(tmp_path, run) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, client):
            stored = {"type": "BlockStored", "block_hashes": [5, 6], "parent_block_hash": None,
                      "token_ids": list(range(32)), "block_size": 16, "lora_id": None,
                      "medium": None}  # fmt: skip
            removed = {"type": "BlockRemoved", "block_hashes": [6], "medium": "gpu"}
            r = await client.post("/v1/kv-events", json={"node": 0, "events": [stored, removed]})
            assert r.status_code == 202, r.text
            await settle(sc)
            assert (await client.get("/v1/blocks/5")).json()["gpu"] == ["node-a"]
            assert (await client.get("/v1/blocks/6")).status_code == 404  # removed: held nowhere

    run(main())


def test_a_mode_switch_during_a_tick_never_sends_one_copy_twice(tmp_path, run, model_path) -> None:
    async def main() -> None:
        cfg = sidecar_config(tmp_path, model=str(model_path))
        async with open_sidecar(cfg) as (sc, client):
            with_telemetry(sc, cfg)
            sent: list = []
            sc.loop.sink = sent.extend  # what would go to the agents
            await hot_chain_on_node_a(client, chain())
            await settle(sc)
            shadow = sc.loop.decider
            decide = shadow.decide

            def decide_then_switch(*args, **kw):  # type: ignore[no-untyped-def]
                out = decide(*args, **kw)
                sc.set_mode("active")  # the operator's POST /v1/mode lands mid-tick
                return out

            shadow.decide = decide_then_switch
            first = await tick(sc)  # decided in shadow mode: logged, not sent
            assert first and {d.mode for d in first} == {"shadow"} and not sent
            await tick(sc)  # the active decider's own first decision
            copies = [(d.kind, d.target, d.block_hashes) for d in sent]
            assert copies and len(copies) == len(set(copies))

    run(main())


def test_recovery_locates_blocks_held_under_bytes_hashes_by_their_u64_id(run) -> None:
    digest = bytes(range(32))  # a sha256-sized bytes block hash

    async def main() -> tuple:
        cfg = AgentConfig(capacity_bytes=1 << 20, speculative_quota_bytes=1 << 19, token="t0k")
        service = AgentService(cfg)
        http, _ = await service.start()
        try:
            buf = HostBuffer(np.full(4096, 7, dtype=np.uint8))
            service.agent.store.put("acme", digest, buf, checksum(buf.view()), BlockState.CACHED)
            queue = EventQueue(100)
            async with httpx.AsyncClient() as client:
                report = await recover_locations(
                    [f"http://{http}"], client, "t0k", queue=queue, replicas=ReplicaTracker(),
                    block_tokens=16, timeout_s=2.0, clock_ms=lambda: 5_000.0,
                )  # fmt: skip
            return report, [e for b in queue.get(100, timeout_s=0.1) for e in b]
        finally:
            await service.stop()

    report, events = run(main(), timeout=15.0)
    assert report.blocks == 1
    assert events == [BlockStored(5_000.0, 0, (hash_from_wire(digest),), None, 16)]


def test_a_replica_past_its_ttl_leaves_the_sidecars_view_of_its_node(tmp_path, run) -> None:
    import asyncio

    from kvcast.features.events import ReplicationDone
    from kvcast.serving.sidecar.tick_input import chain_holders

    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, _):
            blocks = [11, 12]
            # what the executor does when an agent confirms a copy from node 0 to node 1
            sc.replicas.place(1, blocks, "acme", 4096, ttl_s=0.05)
            sc.queue.put([ReplicationDone(sc.clock_ms(), 0, 1, tuple(blocks), ok=True)], "x")
            await settle(sc)

            async def held_on_1() -> bool:
                mask = await asyncio.wrap_future(sc.keeper.ask(lambda k: chain_holders(k, blocks)))
                return bool((mask >> 1) & 1)

            assert await held_on_1()
            await asyncio.sleep(0.1)  # the TTL passes: the agent reclaims it by itself
            assert sc.expire_replicas() == 2 and len(sc.replicas) == 0
            await settle(sc)
            assert not await held_on_1()

    run(main())


def test_a_used_replica_its_engine_never_stored_leaves_at_its_ttl_an_adopted_one_stays(
    tmp_path, run
) -> None:
    """A request routed to the replica's node that never reached the engine's cache (aborted,
    failed over) leaves nothing that would ever remove the block: the TTL must. A block the
    engine stored itself is the engine's to remove."""
    import asyncio

    from kvcast.features.events import ReplicationDone, RequestArrived
    from kvcast.serving.sidecar.tick_input import chain_holders

    async def main() -> tuple[bool, bool]:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, _):
            used, adopted = [21, 22], [31, 32]
            now = sc.clock_ms()
            for blocks in (used, adopted):
                sc.replicas.place(1, blocks, "acme", 4096, ttl_s=0.05)
            sc.queue.put([
                ReplicationDone(now, 0, 1, tuple(used), ok=True),
                ReplicationDone(now, 0, 1, tuple(adopted), ok=True),
                RequestArrived(now, "r1", 1, "acme", "s1", 64, 8, tuple(used)),
                BlockStored(now, 1, tuple(adopted), None, 16),  # the engine cached these
            ], "x")  # fmt: skip
            await settle(sc)
            await asyncio.sleep(0.1)  # both TTLs pass
            assert sc.expire_replicas() == 2 and sc.replicas.used == 2
            await settle(sc)

            async def on_1(blocks: list[int]) -> bool:
                mask = await asyncio.wrap_future(sc.keeper.ask(lambda k: chain_holders(k, blocks)))
                return bool((mask >> 1) & 1)

            return await on_1(used), await on_1(adopted)

    assert run(main()) == (False, True)


def test_a_router_queue_report_older_than_the_one_kept_is_ignored(tmp_path, run) -> None:
    """Concurrent arrival posts can land out of order: the router's newer queue depth stays."""

    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, client):
            now = time.time() * 1000.0

            def arrival(rid: str, depth: int, ts_ms: float) -> dict:
                return {"request_id": rid, "node": "node-a", "tenant": "acme", "block_hashes": [1],
                        "input_tokens": 10, "queue_depth": depth, "ts_ms": ts_ms}  # fmt: skip

            async def post(body: dict) -> None:
                r = await client.post("/v1/requests", json={"requests": [body]})
                assert r.status_code == 202

            await post(arrival("new", 7, now))
            await post(arrival("old", 2, now - 50.0))
            assert sc.loads.queue_depth(0) == 7
            await post(arrival("later", 1, now + 10.0))
            assert sc.loads.queue_depth(0) == 1

    run(main())


def test_a_retried_batch_of_arrivals_is_counted_once(tmp_path, run) -> None:
    """The router timed out on its POST and sends the batch again: each request id enters
    the feature state once, the repeats are answered as duplicates and counted."""

    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path)) as (sc, client):

            def arrival(rid: str) -> dict:
                return {"request_id": rid, "node": "node-a", "tenant": "acme",
                        "block_hashes": [7, 8], "input_tokens": 1024}  # fmt: skip

            batch = {"requests": [arrival("r1"), arrival("r2")]}
            first = (await client.post("/v1/requests", json=batch)).json()
            again = (await client.post("/v1/requests", json=batch)).json()
            mixed = {"requests": [arrival("r2"), arrival("r3"), arrival("r3")]}
            third = (await client.post("/v1/requests", json=mixed)).json()
            await settle(sc)
            assert (first["accepted"], first["duplicates"]) == (2, 0)
            assert (again["accepted"], again["duplicates"]) == (0, 2)
            assert (third["accepted"], third["duplicates"]) == (1, 2)
            assert sc.keeper.applied == 3  # r1, r2, r3: nothing else was posted
            metrics = (await client.get("/metrics")).text
            assert "kvcast_sidecar_duplicate_arrivals_total 4.0" in metrics

    run(main())


def test_the_ids_remembered_are_bounded_oldest_forgotten_first() -> None:
    from kvcast.serving.sidecar.seen_requests import SeenRequests

    seen = SeenRequests(2)
    assert [seen.first_time(r) for r in ("a", "b", "a", "c")] == [True, True, False, True]
    assert seen.first_time("a") and seen.duplicates == 1  # "a" was pushed out by "c"


def test_each_poster_remembers_its_own_ids_so_one_never_pushes_out_anothers() -> None:
    from kvcast.serving.sidecar.seen_requests import SeenRequests

    seen = SeenRequests(3, owner_capacity=2)  # the shared token's 3, each tenant token's 2
    assert seen.first_time("s") and seen.first_time("a", owner=0)
    assert all(seen.first_time(f"b{i}", owner=1) for i in range(10))  # token 1 posts new ids
    assert not seen.first_time("s") and not seen.first_time("a", owner=0)  # still repeats
    assert not seen.first_time("a", owner=1)  # a repeat whoever posts it again
    assert seen.first_time("b0", owner=1) and not seen.first_time("b9", owner=1)  # its own 2
    assert all(seen.first_time(f"s{i}") for i in range(3)) and seen.first_time("s")
    assert seen.duplicates == 4
    with pytest.raises(ValueError, match="owner_capacity must be >= 1, got 0"):
        SeenRequests(3, owner_capacity=0)

"""``POST /v1/replicate`` in process (httpx on the ASGI app, real TCP pulls between agents on
loopback): verified pulls, idempotent command ids, field-named 422s, tenant isolation."""

from __future__ import annotations

import pytest

from kvcast.serving.agent import Agent, HostBuffer, checksum

KiB = 1024


def replicate_body(source: str, hashes: list, **extra: object) -> dict:
    body = {"command_id": "c1", "source": source, "tenant": "t", "block_hashes": hashes}
    return body | {"deadline_s": 3.0} | extra


def test_replicate_pulls_verified_blocks_and_inventory_checksums_match_the_source(
    run, metric, config, control_api, fill_agent
) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, control_api() as (api, _):
            sizes = {1: 64 * KiB, 2: 200 * KiB, 3: KiB}
            fill_agent(src, "t", sizes)
            r = await api.post("/v1/replicate", json=replicate_body(src.address, [1, 2, 3]))
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["status"] == "ok" and sorted(body["committed"]) == [1, 2, 3]
            assert body["bytes_committed"] == sum(sizes.values()) and not body["duplicate"]
            inventory = (await api.get("/v1/inventory")).json()
            held = {b["block_hash"]: b for b in inventory["blocks"]}
            assert set(held) == {1, 2, 3} and inventory["checksum_algorithm"] == "xxh3_64"
            for h in sizes:
                assert held[h]["checksum"] == src.store.info("t", h).checksum
                assert held[h]["state"] == "speculative" and held[h]["ttl_remaining_s"] > 0
            telemetry = (await api.get("/v1/telemetry")).json()
            assert telemetry["bytes"]["speculative"] == sum(sizes.values())
            assert telemetry["blocks"] == {"active": 0, "cached": 0, "speculative": 3}
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_bytes_pulled_total") == sum(sizes.values())
            assert metric(text, "kvcast_agent_blocks_pulled_total") == 3
            assert metric(text, "kvcast_agent_commands_received_total", command="replicate") == 1
            assert src.server.stats.bytes_sent == sum(sizes.values())

    run(scenario())


def test_repeated_command_id_moves_data_once_and_is_flagged_duplicate(
    run, metric, config, control_api, fill_agent
) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, control_api() as (api, _):
            fill_agent(src, "t", {1: 64 * KiB})
            first = await api.post("/v1/replicate", json=replicate_body(src.address, [1]))
            # a retry may carry a fresh deadline
            body = replicate_body(src.address, [1], deadline_s=9.0)
            again = await api.post("/v1/replicate", json=body)
            assert first.json()["committed"] == again.json()["committed"] == [1]
            assert again.json()["duplicate"] and src.server.stats.pulls_served == 1
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_replicate_duplicates_total") == 1

    run(scenario())


def test_command_id_reused_for_another_command_is_refused_with_409(
    run, metric, config, control_api, fill_agent
) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, control_api() as (api, _):
            fill_agent(src, "t", {1: KiB, 2: KiB})
            await api.post("/v1/replicate", json=replicate_body(src.address, [1]))
            r = await api.post("/v1/replicate", json=replicate_body(src.address, [2]))
            assert r.status_code == 409 and "c1" in r.json()["detail"]
            text = (await api.get("/metrics")).text
            reason = {"command": "replicate", "reason": "conflict"}
            assert metric(text, "kvcast_agent_commands_refused_total", **reason) == 1

    run(scenario())


def test_failed_replication_is_reported_and_counted(run, metric, config, control_api) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, control_api() as (api, _):
            r = await api.post("/v1/replicate", json=replicate_body(src.address, [404]))
            assert r.status_code == 200 and r.json()["status"] == "failed"
            assert r.json()["missing"] == [404]
            text = (await api.get("/metrics")).text
            labels = {"command": "replicate", "outcome": "failed"}
            assert metric(text, "kvcast_agent_commands_failed_total", **labels) == 1

    run(scenario())


BAD_BODIES = [
    ({"tenant": None}, "body.tenant"),
    ({"tenant": ""}, "body.tenant"),
    ({"block_hashes": []}, "body.block_hashes"),
    ({"block_hashes": [1, -5]}, "body.block_hashes.1"),
    ({"block_hashes": [2**64]}, "body.block_hashes.0"),
    ({"block_hashes": ["xyz"]}, "body.block_hashes.0"),
    ({"block_hashes": [True]}, "body.block_hashes.0"),
    ({"source": "no-port"}, "body.source"),
    ({"deadline_s": 0}, "body.deadline_s"),
    ({"ttl_s": -1}, "body.ttl_s"),
    ({"state": "active"}, "body.state"),
    ({"command_id": ""}, "body.command_id"),
    ({"deadline": 3.0}, "body.deadline"),  # unknown key (a typo) is refused
]


@pytest.mark.parametrize(("change", "field"), BAD_BODIES, ids=[f for _, f in BAD_BODIES])
def test_invalid_replicate_is_refused_with_422_naming_the_field(
    run, metric, control_api, change: dict, field: str
) -> None:
    async def scenario() -> None:
        async with control_api() as (api, control):
            body = replicate_body("127.0.0.1:9", [1]) | change
            body = {k: v for k, v in body.items() if v is not None}
            r = await api.post("/v1/replicate", json=body)
            assert r.status_code == 422
            assert field in [e["field"] for e in r.json()["detail"]]
            assert field in r.json()["error"]
            assert control.agent.client.stats.pulls == 0
            text = (await api.get("/metrics")).text
            reason = {"command": "replicate", "reason": "invalid"}
            assert metric(text, "kvcast_agent_commands_refused_total", **reason) == 1

    run(scenario())


def test_malformed_json_is_a_422_naming_the_body(run, control_api) -> None:
    async def scenario() -> None:
        async with control_api() as (api, _):
            headers = {"content-type": "application/json"}
            r = await api.post("/v1/evict", content=b"{not json", headers=headers)
            assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("body")

    run(scenario())


def test_bytes_hashes_travel_as_hex_both_ways(run, config, control_api, fill_agent) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, control_api() as (api, _):
            h = bytes.fromhex("00ff10ab")
            fill_agent(src, "t", {7: KiB})
            src.store.put("t", h, *_block(b"\x01" * 100))
            r = await api.post("/v1/replicate", json=replicate_body(src.address, ["00FF10AB", 7]))
            assert r.json()["status"] == "ok" and r.json()["committed"] == ["00ff10ab", 7]
            hashes = [b["block_hash"] for b in (await api.get("/v1/inventory")).json()["blocks"]]
            assert sorted(hashes, key=str) == ["00ff10ab", 7]

    run(scenario())


def _block(data: bytes) -> tuple[HostBuffer, int]:
    buf = HostBuffer.from_bytes(data)
    return buf, checksum(buf.view())


def test_replicate_for_one_tenant_never_pulls_another_tenants_block(
    run, config, control_api, fill_agent
) -> None:
    async def scenario() -> None:
        async with Agent(config()) as src, control_api() as (api, control):
            fill_agent(src, "alice", {7: KiB})
            body = replicate_body(src.address, [7], tenant="bob")
            r = (await api.post("/v1/replicate", json=body)).json()
            assert r["status"] == "failed" and r["missing"] == [7]
            assert len(control.agent.store) == 0 and src.server.stats.blocks_sent == 0

    run(scenario())
